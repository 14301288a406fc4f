// Fencing checks shared by the ResourceManager and the JobMasters
// (leadership.proto FencingToken; error.proto ErrorReason conventions;
// conformance README "Fencing, both ways").
//
// A token is judged against the receiver's current grant of its election:
// malformed (missing, no session, epoch 0) is INVALID_ARGUMENT; older, or of
// another session at an equal epoch, is ABORTED (STALE_FENCING_TOKEN) with
// StaleTokenDetails; newer is UNAVAILABLE (NOT_LEADER), and deposes no one.
import { Code, type ConnectError } from "@connectrpc/connect";
import { StaleTokenDetailsSchema, NotLeaderDetailsSchema, ErrorReason } from "./gen/jobplane/v1/error_pb.js";
import type { FencingToken } from "./gen/jobplane/v1/leadership_pb.js";
import { invalidArgument, jpError } from "./errors.js";

export type TokenVerdict = "current" | "malformed" | "stale" | "newer";

export function malformed(t: FencingToken | undefined): boolean {
  return !t || t.sessionId === "" || t.epoch === 0n;
}

export function judge(t: FencingToken | undefined, current: FencingToken | undefined): TokenVerdict {
  if (malformed(t)) return "malformed";
  if (!current) return "newer";
  if (t!.epoch > current.epoch) return "newer";
  if (t!.epoch < current.epoch || t!.sessionId !== current.sessionId) return "stale";
  return "current";
}

export function sameToken(a: FencingToken | undefined, b: FencingToken | undefined): boolean {
  return !!a && !!b && a.epoch === b.epoch && a.sessionId === b.sessionId;
}

export function malformedError(field: string): ConnectError {
  return invalidArgument([{ field, description: "a fencing token needs a session_id and a non-zero epoch" }]);
}

export function staleError(election: string, current: FencingToken | undefined): ConnectError {
  const md: Record<string, string> = { election };
  if (current) {
    md["current_session_id"] = current.sessionId;
    md["current_epoch"] = String(current.epoch);
  }
  return jpError(Code.Aborted, "STALE_FENCING_TOKEN", `stale fencing token for ${election}`, md, [
    { desc: StaleTokenDetailsSchema, value: { election, current } },
  ]);
}

/** UNAVAILABLE (NOT_LEADER) for an election other than `jobmanager` (a job's), naming its leader when known. */
export function notLeaderOf(election: string, address = "", token?: FencingToken): ConnectError {
  const md: Record<string, string> = { election };
  if (address) md["leader_address"] = address;
  return jpError(Code.Unavailable, "NOT_LEADER", `this process does not lead ${election}`, md, [
    { desc: NotLeaderDetailsSchema, value: { leader: { election, address, token } } },
  ]);
}

export function notRegistered(what: string, md: Record<string, string> = {}): ConnectError {
  return jpError(Code.FailedPrecondition, "NOT_REGISTERED", what, md);
}

/** The ErrorReason enum value of a reason name, for ItemError. */
export function reasonEnum(name: string): ErrorReason {
  return (ErrorReason as unknown as Record<string, ErrorReason>)[name] ?? ErrorReason.INTERNAL;
}

/**
 * Throws the answer for a token that is not `current`: the caller continues
 * only for the current token.
 */
export function requireCurrent(
  t: FencingToken | undefined,
  current: FencingToken | undefined,
  election: string,
  field: string,
  leaderAddress = "",
): void {
  switch (judge(t, current)) {
    case "current":
      return;
    case "malformed":
      throw malformedError(field);
    case "stale":
      throw staleError(election, current);
    case "newer":
      throw notLeaderOf(election, leaderAddress, current);
  }
}
