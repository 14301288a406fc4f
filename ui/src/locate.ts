// Where a field of a JSON text is: the server names the fields it refuses
// by their proto paths (`job_graph.vertices[0].invokable`), and the
// editor shows each refusal at its place in the text.

/** A span of the text: [start, end) offsets. */
export type Span = [number, number];

const snake = (k: string) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());

/**
 * locate returns the span of every member and element of the JSON text,
 * by its path under prefix: `prefix.key` (keys in snake_case, as proto
 * paths name them; also `prefix["key"]`, as map entries are named) and
 * `prefix[i]`. A member's span runs from its key to the end of its value.
 * A text that is not JSON gives what was found before the error.
 */
export function locate(text: string, prefix: string): Map<string, Span> {
  const spans = new Map<string, Span>();
  let i = 0;
  const ws = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  const str = (): string => {
    const start = i;
    i++; // the opening quote
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    i++;
    try {
      return JSON.parse(text.slice(start, i)) as string;
    } catch {
      return "";
    }
  };
  const value = (path: string): void => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      for (;;) {
        ws();
        if (text[i] !== '"') break;
        const keyStart = i;
        const key = str();
        ws();
        if (text[i] !== ":") return;
        i++;
        const paths = [`${path}.${snake(key)}`, `${path}[${JSON.stringify(key)}]`];
        value(paths[0]!);
        for (const p of paths) if (!spans.has(p)) spans.set(p, [keyStart, i]);
        ws();
        if (text[i] !== ",") break;
        i++;
      }
      ws();
      if (text[i] === "}") i++;
    } else if (c === "[") {
      i++;
      for (let n = 0; ; n++) {
        ws();
        if (text[i] === "]") break;
        const start = i;
        value(`${path}[${n}]`);
        spans.set(`${path}[${n}]`, [start, i]);
        ws();
        if (text[i] !== ",") break;
        i++;
      }
      ws();
      if (text[i] === "]") i++;
    } else if (c === '"') {
      str();
    } else {
      while (i < text.length && /[^\s,\]}]/.test(text[i]!)) i++;
    }
  };
  value(prefix);
  spans.set(prefix, [0, text.length]);
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
