// Unknown fields in JSON requests (DispatcherService: "in JSON by the key as
// sent, such as `job_graph.config.restartStrateg`", and enum values given
// by a name the schema does not have). connect-node refuses them itself,
// without the ErrorInfo and BadRequest the contract requires; so a Connect
// unary JSON body is read and checked here first, then handed to the
// framework already parsed.
import type { DescField, DescMessage } from "@bufbuild/protobuf";
import type { Violation } from "./errors.js";

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function enumNameUnknown(f: DescField, v: unknown): boolean {
  return typeof v === "string" && f.enum !== undefined && !f.enum.values.some((e) => e.name === v);
}

/** One violation per key the schema lacks (and per unknown enum name), at any depth. */
export function unknownJsonViolations(desc: DescMessage, json: unknown, prefix = ""): Violation[] {
  const out: Violation[] = [];
  if (!isObject(json)) return out;
  // google.protobuf types have their own JSON forms (a Duration is a string).
  if (desc.typeName.startsWith("google.protobuf.")) return out;
  for (const [key, value] of Object.entries(json)) {
    const f = desc.fields.find((x) => x.jsonName === key || x.name === key);
    if (!f) {
      out.push({ field: prefix + key, description: "unknown field" });
      continue;
    }
    const path = prefix + f.name;
    if (value === null) continue;
    switch (f.fieldKind) {
      case "enum":
        if (enumNameUnknown(f, value)) out.push({ field: path, description: `unknown enum value ${String(value)}` });
        break;
      case "message":
        out.push(...unknownJsonViolations(f.message, value, `${path}.`));
        break;
      case "list":
        if (!Array.isArray(value)) break;
        value.forEach((item, i) => {
          if (f.listKind === "message") out.push(...unknownJsonViolations(f.message, item, `${path}[${i}].`));
          else if (f.listKind === "enum" && enumNameUnknown(f, item)) {
            out.push({ field: `${path}[${i}]`, description: `unknown enum value ${String(item)}` });
          }
        });
        break;
      case "map":
        if (!isObject(value)) break;
        for (const [k, item] of Object.entries(value)) {
          if (f.mapKind === "message") out.push(...unknownJsonViolations(f.message, item, `${path}[${k}].`));
          else if (f.mapKind === "enum" && enumNameUnknown(f, item)) {
            out.push({ field: `${path}[${k}]`, description: `unknown enum value ${String(item)}` });
          }
        }
        break;
    }
  }
  return out;
}
