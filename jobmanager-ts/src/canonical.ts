// The canonical encoding (job_graph.proto, "Plan identity"; HAStoreService,
// "Equality") and the plan digest.
//
// protobuf-es's toBinary is not canonical: it writes fields in declaration
// order and map entries in JavaScript object order (integer-like keys first,
// numerically), so we walk the descriptors ourselves.
import { createHash } from "node:crypto";
import { clone, ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import type { Duration } from "@bufbuild/protobuf/wkt";
import {
  JobGraphSchema,
  SchedulingMode,
  type JobConfig,
  type JobGraph,
  type RestartStrategy,
} from "./gen/jobplane/v1/job_graph_pb.js";

// Field presence values of protobuf-es's descriptors (FeatureSet.FieldPresence).
const EXPLICIT = 1;

type AnyMsg = Message & Record<string, unknown>;

function wireTypeOf(t: ScalarType): WireType {
  switch (t) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return WireType.Bit32;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return WireType.LengthDelimited;
    default:
      return WireType.Varint;
  }
}

function writeScalarValue(w: BinaryWriter, t: ScalarType, v: unknown): void {
  switch (t) {
    case ScalarType.DOUBLE: w.double(v as number); break;
    case ScalarType.FLOAT: w.float(v as number); break;
    case ScalarType.INT64: w.int64(v as bigint); break;
    case ScalarType.UINT64: w.uint64(v as bigint); break;
    case ScalarType.INT32: w.int32(v as number); break;
    case ScalarType.FIXED64: w.fixed64(v as bigint); break;
    case ScalarType.FIXED32: w.fixed32(v as number); break;
    case ScalarType.BOOL: w.bool(v as boolean); break;
    case ScalarType.STRING: w.string(v as string); break;
    case ScalarType.BYTES: w.bytes(v as Uint8Array); break;
    case ScalarType.UINT32: w.uint32(v as number); break;
    case ScalarType.SFIXED32: w.sfixed32(v as number); break;
    case ScalarType.SFIXED64: w.sfixed64(v as bigint); break;
    case ScalarType.SINT32: w.sint32(v as number); break;
    case ScalarType.SINT64: w.sint64(v as bigint); break;
  }
}

/** Whether an implicit-presence scalar differs from its default (floats by their bits). */
function isNonDefault(t: ScalarType, v: unknown): boolean {
  switch (t) {
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v as number) !== 0 || Object.is(v, -0);
    case ScalarType.BOOL:
      return v === true;
    case ScalarType.STRING:
      return (v as string) !== "";
    case ScalarType.BYTES:
      return (v as Uint8Array).length > 0;
    default:
      return typeof v === "bigint" ? v !== 0n : (v as number) !== 0;
  }
}

function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

function sortedMapKeys(field: DescField & { fieldKind: "map" }, obj: Record<string, unknown>): string[] {
  const keys = Object.keys(obj);
  switch (field.mapKey) {
    case ScalarType.STRING:
      return keys.sort(compareUtf8);
    case ScalarType.BOOL:
      return keys.sort(); // "false" < "true"
    default:
      // Integer keys compare as numbers.
      return keys.sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
  }
}

function mapKeyValue(t: ScalarType, k: string): unknown {
  switch (t) {
    case ScalarType.STRING: return k;
    case ScalarType.BOOL: return k === "true";
    case ScalarType.INT64: case ScalarType.UINT64: case ScalarType.FIXED64:
    case ScalarType.SFIXED64: case ScalarType.SINT64:
      return BigInt(k);
    default: return Number(k);
  }
}

function writeMessage(w: BinaryWriter, desc: DescMessage, msg: AnyMsg): void {
  const fields = [...desc.fields].sort((a, b) => a.number - b.number);
  for (const f of fields) {
    let value: unknown;
    let present: boolean;
    if (f.oneof) {
      const o = msg[f.oneof.localName] as { case?: string; value?: unknown };
      present = o?.case === f.localName;
      value = present ? o.value : undefined;
    } else {
      value = msg[f.localName];
      present = value !== undefined;
    }
    if (!present) continue;
    switch (f.fieldKind) {
      case "scalar":
        if (!f.oneof && f.presence !== EXPLICIT && !isNonDefault(f.scalar, value)) break;
        w.tag(f.number, wireTypeOf(f.scalar));
        writeScalarValue(w, f.scalar, value);
        break;
      case "enum":
        if (!f.oneof && f.presence !== EXPLICIT && (value as number) === 0) break;
        w.tag(f.number, WireType.Varint).int32(value as number);
        break;
      case "message":
        w.tag(f.number, WireType.LengthDelimited).fork();
        writeMessage(w, f.message, value as AnyMsg);
        w.join();
        break;
      case "list": {
        const list = value as unknown[];
        if (list.length === 0) break;
        if (f.listKind === "message") {
          for (const item of list) {
            w.tag(f.number, WireType.LengthDelimited).fork();
            writeMessage(w, f.message, item as AnyMsg);
            w.join();
          }
        } else if (f.listKind === "enum" || (f.scalar !== ScalarType.STRING && f.scalar !== ScalarType.BYTES)) {
          // Numbers, bools and enums packed.
          w.tag(f.number, WireType.LengthDelimited).fork();
          for (const item of list) {
            if (f.listKind === "enum") w.int32(item as number);
            else writeScalarValue(w, f.scalar, item);
          }
          w.join();
        } else {
          for (const item of list) {
            w.tag(f.number, WireType.LengthDelimited);
            writeScalarValue(w, f.scalar, item);
          }
        }
        break;
      }
      case "map": {
        const obj = value as Record<string, unknown>;
        for (const k of sortedMapKeys(f, obj)) {
          const v = obj[k];
          w.tag(f.number, WireType.LengthDelimited).fork();
          // Both key and value are written, even at their defaults.
          w.tag(1, wireTypeOf(f.mapKey));
          writeScalarValue(w, f.mapKey, mapKeyValue(f.mapKey, k));
          if (f.mapKind === "message") {
            w.tag(2, WireType.LengthDelimited).fork();
            writeMessage(w, f.message, v as AnyMsg);
            w.join();
          } else if (f.mapKind === "enum") {
            w.tag(2, WireType.Varint).int32(v as number);
          } else {
            w.tag(2, wireTypeOf(f.scalar));
            writeScalarValue(w, f.scalar, v);
          }
          w.join();
        }
        break;
      }
    }
  }
  // Unknown fields are never written.
}

/** The canonical encoding of a message. */
export function canonicalBytes<D extends DescMessage>(desc: D, msg: Message): Uint8Array {
  const w = new BinaryWriter();
  writeMessage(w, desc, msg as AnyMsg);
  return w.finish();
}

function isZeroDuration(d: Duration | undefined): boolean {
  return d !== undefined && d.seconds === 0n && d.nanos === 0;
}

function dropZero(d: Duration | undefined): Duration | undefined {
  return d === undefined || isZeroDuration(d) ? undefined : d;
}

function normalizeRestart(rs: RestartStrategy | undefined): RestartStrategy | undefined {
  if (!rs) return undefined;
  const s = rs.strategy;
  switch (s.case) {
    case undefined:
    case "none":
      return undefined;
    case "fixedDelay":
      s.value.delay = dropZero(s.value.delay);
      break;
    case "exponentialDelay": {
      const e = s.value;
      e.initialDelay = dropZero(e.initialDelay);
      e.maxDelay = dropZero(e.maxDelay);
      e.resetAfter = dropZero(e.resetAfter);
      if (e.multiplier === 2 || Object.is(e.multiplier, -0)) e.multiplier = 0;
      if (Object.is(e.jitter, -0)) e.jitter = 0;
      break;
    }
    case "failureRate":
      s.value.interval = dropZero(s.value.interval);
      s.value.delay = dropZero(s.value.delay);
      break;
  }
  return rs;
}

function configIsEmpty(c: JobConfig): boolean {
  return (
    c.restartStrategy === undefined &&
    Object.keys(c.parallelismOverrides).length === 0 &&
    c.clientHeartbeatTimeout === undefined &&
    c.schedulingMode === SchedulingMode.UNSPECIFIED &&
    c.checkpoints === undefined &&
    c.restoreFromSavepoint === ""
  );
}

/** The normalized form of a JobGraph as submitted (job_graph.proto, "Plan identity"). */
export function normalizeGraph(graph: JobGraph): JobGraph {
  const g = clone(JobGraphSchema, graph);
  const ids = new Set<string>();
  for (const v of g.vertices) {
    ids.add(v.id);
    if (v.name === v.id) v.name = "";
  }
  const c = g.config;
  if (c) {
    for (const k of Object.keys(c.parallelismOverrides)) {
      if (!ids.has(k)) delete c.parallelismOverrides[k];
    }
    c.restartStrategy = normalizeRestart(c.restartStrategy);
    c.clientHeartbeatTimeout = dropZero(c.clientHeartbeatTimeout);
    if (c.schedulingMode === SchedulingMode.PIPELINED_REGION) c.schedulingMode = SchedulingMode.UNSPECIFIED;
    const cp = c.checkpoints;
    if (cp) {
      if (cp.interval === undefined || isZeroDuration(cp.interval)) {
        c.checkpoints = undefined;
      } else {
        cp.timeout = dropZero(cp.timeout);
        cp.minPause = dropZero(cp.minPause);
        if (cp.retained === 1) cp.retained = 0;
      }
    }
    if (configIsEmpty(c)) g.config = undefined;
  }
  return g;
}

/** The plan digest: SHA-256 of the canonical encoding of the normalized graph. */
export function planDigest(graph: JobGraph): Uint8Array {
  const bytes = canonicalBytes(JobGraphSchema, normalizeGraph(graph));
  return new Uint8Array(createHash("sha256").update(bytes).digest());
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
}

