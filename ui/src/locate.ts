// Where a field of the editor's text is: the server names the fields it
// refuses by their proto paths (`job_graph.vertices[0].invokable`), and
// the editor shows each refusal at its place in the text, JSON or YAML
// alike (JSON is YAML), from the positions the yaml parser keeps.

import { isMap, isPair, isScalar, isSeq, type Document, type Node } from "yaml";

/** A span of the text: [start, end) offsets. */
export type Span = [number, number];

const snake = (k: string) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

/**
 * locate returns the span of every member and element of doc, by its path
 * under prefix: `prefix.key` (keys in snake_case, as proto paths name
 * them; also `prefix["key"]`, as map entries are named) and `prefix[i]`.
 * A member's span runs from its key to the end of its value.
 */
export function locate(doc: Document, prefix: string): Map<string, Span> {
  const spans = new Map<string, Span>();
  const walk = (node: unknown, path: string): void => {
    if (isMap(node)) {
      for (const item of node.items) {
        if (!isPair(item) || !isScalar(item.key)) continue;
        const key = String(item.key.value);
        const start = item.key.range?.[0];
        const end = (item.value as Node | null)?.range?.[1] ?? item.key.range?.[1];
        for (const p of [`${path}.${snake(key)}`, `${path}[${JSON.stringify(key)}]`]) {
          if (start !== undefined && end !== undefined && !spans.has(p)) spans.set(p, [start, end]);
        }
        walk(item.value, `${path}.${snake(key)}`);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => {
        const r = (item as Node | null)?.range;
        if (r) spans.set(`${path}[${i}]`, [r[0], r[1]]);
        walk(item, `${path}[${i}]`);
      });
    }
  };
  walk(doc.contents, prefix);
  const r = (doc.contents as Node | null)?.range;
  if (r) spans.set(prefix, [r[0], r[1]]);
  return spans;
}

/**
 * spanOf returns the span of field in spans, or of the nearest field
 * above it that the text has (a missing field is shown at its parent).
 */
export function spanOf(spans: Map<string, Span>, field: string): Span | undefined {
  for (let f = field; f !== ""; f = f.replace(/(\.[^.[\]]*|\[[^\]]*\])$/, "")) {
    const s = spans.get(f);
    if (s !== undefined) return s;
    if (!/[.[]/.test(f)) break;
  }
  return undefined;
}

/** The line (from 1) of offset in text. */
export function lineOf(text: string, offset: number): number {
  let n = 1;
  for (let k = 0; k < offset && k < text.length; k++) if (text[k] === "\n") n++;
  return n;
}
