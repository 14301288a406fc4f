// Errors as the contract wants them (error.proto, ErrorReason conventions):
// every error a handler answers carries exactly one google.rpc.ErrorInfo of
// domain `jobplane`, whose reason is the ErrorReason name without its
// prefix, with the code ErrorReason pairs with it; plus the typed details
// (BadRequest, NotLeaderDetails) where the contract promises them.
import { Code, ConnectError } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { NotLeaderDetailsSchema } from "./gen/jobplane/v1/error_pb.js";
import type { LeaderInfo } from "./gen/jobplane/v1/leadership_pb.js";

export const DOMAIN = "jobplane";

type Detail = ConstructorParameters<typeof ConnectError>[3];

export function jpError(
  code: Code,
  reason: string,
  message: string,
  metadata: Record<string, string> = {},
  extra: NonNullable<Detail> = [],
): ConnectError {
  const e = new ConnectError(message, code, undefined, [
    { desc: ErrorInfoSchema, value: { domain: DOMAIN, reason, metadata } },
    ...extra,
  ]);
  OURS.add(e);
  return e;
}

/** The errors this server built, as opposed to ones a store call threw. */
const OURS = new WeakSet<ConnectError>();
export function isOurs(e: unknown): e is ConnectError {
  return e instanceof ConnectError && OURS.has(e);
}

export interface Violation {
  field: string;
  description: string;
}

/** INVALID_ARGUMENT with one BadRequest field violation per offending field. */
export function invalidArgument(violations: Violation[]): ConnectError {
  const value: MessageInitShape<typeof BadRequestSchema> = { fieldViolations: violations };
  const msg = violations.map((v) => `${v.field || "(body)"}: ${v.description}`).join("; ");
  return jpError(Code.InvalidArgument, "INVALID_ARGUMENT", msg, {}, [{ desc: BadRequestSchema, value }]);
}

/** UNAVAILABLE (NOT_LEADER), naming the leader when it is known. */
export function notLeader(leader: LeaderInfo | undefined): ConnectError {
  const metadata: Record<string, string> = { election: "jobmanager" };
  if (leader?.address) metadata["leader_address"] = leader.address;
  return jpError(
    Code.Unavailable,
    "NOT_LEADER",
    leader?.address ? `not the leader; the leader is at ${leader.address}` : "not the leader",
    metadata,
    [
      {
        desc: NotLeaderDetailsSchema,
        value: {
          leader: {
            election: "jobmanager",
            address: leader?.address ?? "",
            token: leader?.token,
            clusterAddress: leader?.clusterAddress ?? "",
          },
        },
      },
    ],
  );
}

export function jobNotFound(jobId: string, runId = ""): ConnectError {
  const md: Record<string, string> = { job_id: jobId };
  if (runId) md["run_id"] = runId;
  return jpError(Code.NotFound, "JOB_NOT_FOUND", `job ${jobId} not found`, md);
}

export function unimplemented(what: string): ConnectError {
  return jpError(Code.Unimplemented, "UNIMPLEMENTED", `${what} is not implemented by this server yet`);
}

/** The ErrorInfo reason of an error another jobplane process answered, if any. */
export function reasonOf(err: unknown): { code: Code; reason: string; metadata: Record<string, string> } {
  const ce = ConnectError.from(err);
  const info = ce.findDetails(ErrorInfoSchema)[0];
  return { code: ce.code, reason: info?.reason ?? "", metadata: info?.metadata ?? {} };
}

/** Any error leaving a handler carries our ErrorInfo; a bug becomes INTERNAL. */
export function asHandlerError(e: unknown, name: string, log: (m: string) => void): ConnectError {
  if (isOurs(e)) return e;
  if (e instanceof ConnectError) {
    // A store call's error that escaped a handler: the store could not be
    // used; what it did is unknown, as for a lost answer.
    log(`${name}: HA store error: ${e.message}`);
    return jpError(Code.Unavailable, "STORE_UNAVAILABLE", `HA store: ${e.message}`);
  }
  log(`${name}: internal error: ${String(e)}`);
  return jpError(Code.Internal, "INTERNAL", `${name} failed: ${e instanceof Error ? e.message : String(e)}`);
}

/** Wraps a handler so that whatever it throws leaves as asHandlerError makes it. */
export type Guard = <A extends unknown[], R>(name: string, fn: (...a: A) => Promise<R>) => (...a: A) => Promise<R>;

export function makeGuard(log: (m: string) => void): Guard {
  return <A extends unknown[], R>(name: string, fn: (...a: A) => Promise<R>) =>
    async (...a: A): Promise<R> => {
      try {
        return await fn(...a);
      } catch (e) {
        throw asHandlerError(e, name, log);
      }
    };
}

/**
 * A service's unary methods, each guarded under its name: `prefix` and the
 * method's name with its first letter capitalized (`RM.` + `heartbeat` is
 * `RM.Heartbeat`), as the logs name them.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function guardAll<T extends Record<string, (...a: any[]) => Promise<unknown>>>(guard: Guard, prefix: string, methods: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, fn] of Object.entries(methods)) out[k] = guard(prefix + k[0]!.toUpperCase() + k.slice(1), fn);
  return out as T;
}
