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
