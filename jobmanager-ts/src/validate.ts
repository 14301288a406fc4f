// Input validation for the public API (DispatcherService): unknown fields,
// job ids and JobGraphs (job_graph.proto, JobGraph's list of rules). Each
// check yields a BadRequest field violation with the path in proto field
// names, e.g. `job_graph.vertices[1].invokable`.
import type { DescMessage, Message } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import {
  DistributionPattern,
  ResultPartitionType,
  type JobGraph,
} from "./gen/jobplane/v1/job_graph_pb.js";
import type { Violation } from "./errors.js";

export const LIMITS = {
  maxRequestBytes: 4 * 1024 * 1024,
  maxResponseBytes: 16 * 1024 * 1024,
  // The reference store's plan limit is 1 MiB; the plan adds a digest, a
  // time, ids: keep a margin below it (see QUESTIONS.md).
  maxGraphBytes: 1024 * 1024 - 4096,
  maxVertices: 10_000,
  maxSubtasks: 100_000,
  maxListPageSize: 1000,
  maxSubtaskPageSize: 10_000,
  defaultMaxParallelism: 32_768,
};

const JOB_ID = /^[A-Za-z0-9_-]{1,64}$/;
const VERTEX_ID = /^[A-Za-z0-9._-]{1,128}$/;

type AnyMsg = Message & Record<string, unknown> & { $unknown?: { no: number }[] };

/**
 * One violation per field the schema does not have, at any depth, named by
 * number as binary carries it (`job_graph.config.99`).
 */
export function unknownFieldViolations(desc: DescMessage, msg: Message, prefix = ""): Violation[] {
  const out: Violation[] = [];
  const m = msg as AnyMsg;
  const at = (name: string) => (prefix ? `${prefix}.${name}` : name);
  for (const u of m.$unknown ?? []) {
    out.push({ field: at(String(u.no)), description: "unknown field" });
  }
  for (const f of desc.fields) {
    let v: unknown;
    if (f.oneof) {
      const o = m[f.oneof.localName] as { case?: string; value?: unknown };
      if (o?.case !== f.localName) continue;
      v = o.value;
    } else {
      v = m[f.localName];
    }
    if (v === undefined) continue;
    if (f.fieldKind === "message") {
      out.push(...unknownFieldViolations(f.message, v as Message, at(f.name)));
    } else if (f.fieldKind === "list" && f.listKind === "message") {
      (v as Message[]).forEach((item, i) => out.push(...unknownFieldViolations(f.message, item, `${at(f.name)}[${i}]`)));
    } else if (f.fieldKind === "map" && f.mapKind === "message") {
      for (const [k, item] of Object.entries(v as Record<string, Message>)) {
        out.push(...unknownFieldViolations(f.message, item, `${at(f.name)}[${JSON.stringify(k)}]`));
      }
    }
  }
  return out;
}

export function jobIdViolation(jobId: string, field = "job_id"): Violation | undefined {
  if (!JOB_ID.test(jobId)) {
    return { field, description: "must be 1 to 64 characters from [A-Za-z0-9_-]" };
  }
  return undefined;
}

export function maxBytesViolation(value: string, max: number, field: string): Violation | undefined {
  return Buffer.byteLength(value, "utf8") > max ? { field, description: `at most ${max} bytes` } : undefined;
}

const MAX_DURATION_SECONDS = 315_576_000_000n;

/** A Duration that is normalized and, if `nonNegative`, not negative. */
function checkDuration(d: Duration | undefined, field: string, out: Violation[], opts: { positive?: boolean } = {}): void {
  if (d === undefined) {
    if (opts.positive) out.push({ field, description: "required, must be positive" });
    return;
  }
  const { seconds, nanos } = d;
  if (nanos <= -1_000_000_000 || nanos >= 1_000_000_000 || seconds > MAX_DURATION_SECONDS || seconds < -MAX_DURATION_SECONDS ||
      (seconds > 0n && nanos < 0) || (seconds < 0n && nanos > 0)) {
    out.push({ field, description: "not a normalized Duration" });
    return;
  }
  if (seconds < 0n || nanos < 0) {
    out.push({ field, description: "must not be negative" });
    return;
  }
  if (opts.positive && seconds === 0n && nanos === 0) out.push({ field, description: "must be positive" });
}

function durationMs(d: Duration | undefined): number {
  return d === undefined ? 0 : Number(d.seconds) * 1000 + d.nanos / 1e6;
}

/** Parallelism of each vertex after the job's overrides. */
export function effectiveParallelism(graph: JobGraph): number[] {
  const ov = graph.config?.parallelismOverrides ?? {};
  return graph.vertices.map((v) => (Object.hasOwn(ov, v.id) ? ov[v.id]! : v.parallelism));
}

/** Every violation of the JobGraph rules, with `encodedSize` the graph's encoded size. */
export function graphViolations(graph: JobGraph | undefined, encodedSize: number): Violation[] {
  const out: Violation[] = [];
  if (!graph) return [{ field: "job_graph", description: "required" }];
  if (encodedSize > LIMITS.maxGraphBytes) {
    out.push({ field: "job_graph", description: `encoded graph is ${encodedSize} bytes, over the limit of ${LIMITS.maxGraphBytes}` });
  }
  const nameV = maxBytesViolation(graph.name, 256, "job_graph.name");
  if (nameV) out.push(nameV);
  const vs = graph.vertices;
  if (vs.length === 0) out.push({ field: "job_graph.vertices", description: "at least one vertex is required" });
  if (vs.length > LIMITS.maxVertices) {
    out.push({ field: "job_graph.vertices", description: `at most ${LIMITS.maxVertices} vertices` });
  }
  // An override below 1 is its own violation; the vertex's own parallelism
  // counts instead (job_graph.proto, since 1.2).
  const ovs = graph.config?.parallelismOverrides ?? {};
  const par = vs.map((v) => (Object.hasOwn(ovs, v.id) && ovs[v.id]! >= 1 ? ovs[v.id]! : v.parallelism));
  const maxOf = (i: number) => (vs[i]!.maxParallelism > 0 ? vs[i]!.maxParallelism : LIMITS.defaultMaxParallelism);
  // The subtasks counted are the parallelisms within bounds.
  const total = par.reduce((a, p, i) => a + (p >= 1 && p <= maxOf(i) ? p : 0), 0);
  if (total > LIMITS.maxSubtasks) {
    out.push({ field: "job_graph.vertices", description: `at most ${LIMITS.maxSubtasks} subtasks in all` });
  }
  const ids = new Map<string, number>();
  vs.forEach((v, i) => {
    const p = `job_graph.vertices[${i}]`;
    if (!VERTEX_ID.test(v.id)) {
      out.push({ field: `${p}.id`, description: "must be 1 to 128 characters from [A-Za-z0-9._-]" });
    } else if (ids.has(v.id)) {
      out.push({ field: `${p}.id`, description: `duplicate vertex id ${v.id}` });
    } else {
      ids.set(v.id, i);
    }
    const nv = maxBytesViolation(v.name, 256, `${p}.name`);
    if (nv) out.push(nv);
    if (v.invokable === "") out.push({ field: `${p}.invokable`, description: "required" });
    if (v.maxParallelism < 0) out.push({ field: `${p}.max_parallelism`, description: "must not be negative" });
    const max = v.maxParallelism > 0 ? v.maxParallelism : LIMITS.defaultMaxParallelism;
    if (par[i]! < 1 || par[i]! > max) {
      out.push({ field: `${p}.parallelism`, description: `parallelism after overrides (${par[i]}) must be from 1 to ${max}` });
    }
  });
  // Edges: known, distinct endpoints, required enums, no cycle.
  const adj = new Map<string, string[]>();
  graph.edges.forEach((e, i) => {
    const p = `job_graph.edges[${i}]`;
    let ok = true;
    if (!ids.has(e.sourceVertexId)) { out.push({ field: `${p}.source_vertex_id`, description: "names no vertex" }); ok = false; }
    if (!ids.has(e.targetVertexId)) { out.push({ field: `${p}.target_vertex_id`, description: "names no vertex" }); ok = false; }
    else if (ok && e.targetVertexId === e.sourceVertexId) { out.push({ field: p, description: "joins a vertex to itself" }); ok = false; }
    if (e.distribution === DistributionPattern.UNSPECIFIED) out.push({ field: `${p}.distribution`, description: "required" });
    if (e.resultType === ResultPartitionType.UNSPECIFIED) out.push({ field: `${p}.result_type`, description: "required" });
    if (ok) {
      const l = adj.get(e.sourceVertexId) ?? [];
      l.push(e.targetVertexId);
      adj.set(e.sourceVertexId, l);
    }
  });
  if (hasCycle(adj)) out.push({ field: "job_graph.edges", description: "the edges form a cycle" });

  const c = graph.config;
  if (c) {
    const cp = "job_graph.config";
    for (const [k, val] of Object.entries(c.parallelismOverrides)) {
      if (val < 1) out.push({ field: `${cp}.parallelism_overrides[${JSON.stringify(k)}]`, description: "must be at least 1" });
    }
    checkDuration(c.clientHeartbeatTimeout, `${cp}.client_heartbeat_timeout`, out);
    const rs = c.restartStrategy?.strategy;
    const rp = `${cp}.restart_strategy`;
    const bound = (attempts: number, unlimited: boolean, p: string) => {
      if (attempts < 0) out.push({ field: `${p}.attempts`, description: "must not be negative" });
      else if (attempts === 0 && !unlimited) out.push({ field: `${p}.attempts`, description: "must be at least 1, or set unlimited" });
      else if (attempts > 0 && unlimited) out.push({ field: `${p}.unlimited`, description: "must not be set with attempts" });
    };
    if (rs?.case === "fixedDelay") {
      const p = `${rp}.fixed_delay`;
      bound(rs.value.attempts, rs.value.unlimited, p);
      checkDuration(rs.value.delay, `${p}.delay`, out);
    } else if (rs?.case === "exponentialDelay") {
      const p = `${rp}.exponential_delay`;
      const e = rs.value;
      checkDuration(e.initialDelay, `${p}.initial_delay`, out, { positive: true });
      checkDuration(e.maxDelay, `${p}.max_delay`, out);
      if (durationMs(e.maxDelay) < durationMs(e.initialDelay)) {
        out.push({ field: `${p}.max_delay`, description: "must be at least initial_delay" });
      }
      if (!(e.multiplier === 0 || e.multiplier >= 1)) out.push({ field: `${p}.multiplier`, description: "must be at least 1 (or 0 for 2)" });
      if (!(e.jitter >= 0 && e.jitter <= 1)) out.push({ field: `${p}.jitter`, description: "must be in [0, 1]" });
      checkDuration(e.resetAfter, `${p}.reset_after`, out);
      bound(e.attempts, e.unlimited, p);
    } else if (rs?.case === "failureRate") {
      const p = `${rp}.failure_rate`;
      if (rs.value.maxFailures < 1) out.push({ field: `${p}.max_failures`, description: "must be at least 1" });
      checkDuration(rs.value.interval, `${p}.interval`, out, { positive: true });
      checkDuration(rs.value.delay, `${p}.delay`, out);
    }
    const ck = c.checkpoints;
    if (ck) {
      const p = `${cp}.checkpoints`;
      checkDuration(ck.interval, `${p}.interval`, out);
      const ms = durationMs(ck.interval);
      if (ms > 0 && ms < 10) out.push({ field: `${p}.interval`, description: "must be at least 10ms when set" });
      checkDuration(ck.timeout, `${p}.timeout`, out);
      checkDuration(ck.minPause, `${p}.min_pause`, out);
      if (ck.retained < 0 || ck.retained > 100) out.push({ field: `${p}.retained`, description: "must be from 0 to 100" });
      if (ck.tolerableFailures !== undefined && ck.tolerableFailures < 0) {
        out.push({ field: `${p}.tolerable_failures`, description: "must not be negative" });
      }
    }
  }
  return out;
}

function hasCycle(adj: Map<string, string[]>): boolean {
  const state = new Map<string, 1 | 2>(); // 1: on the stack, 2: done
  const visit = (n: string): boolean => {
    const s = state.get(n);
    if (s === 1) return true;
    if (s === 2) return false;
    state.set(n, 1);
    for (const m of adj.get(n) ?? []) if (visit(m)) return true;
    state.set(n, 2);
    return false;
  };
  for (const n of adj.keys()) if (visit(n)) return true;
  return false;
}
