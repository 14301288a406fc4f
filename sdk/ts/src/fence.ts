// Errors a TaskExecutor answers, built as jobplane servers build them
// (proto/jobplane/v1/error.proto): one ErrorInfo of domain "jobplane", and
// the typed detail that goes with the reason.

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { ErrorReason, ItemErrorSchema, StaleTokenDetailsSchema, type ItemError } from "../gen/jobplane/v1/error_pb.js";
import type { FencingToken } from "../gen/jobplane/v1/leadership_pb.js";
import { ERROR_DOMAIN, reasonOf } from "./errors.js";

/** The status code that accompanies each reason a TaskExecutor answers. */
const codes: Partial<Record<ErrorReason, Code>> = {
  [ErrorReason.STALE_FENCING_TOKEN]: Code.Aborted,
  [ErrorReason.INVALID_ARGUMENT]: Code.InvalidArgument,
  [ErrorReason.SLOT_OCCUPIED]: Code.FailedPrecondition,
  [ErrorReason.SLOT_NOT_ALLOCATED]: Code.FailedPrecondition,
  [ErrorReason.UNKNOWN_INVOKABLE]: Code.FailedPrecondition,
  [ErrorReason.NOT_REGISTERED]: Code.FailedPrecondition,
  [ErrorReason.EXECUTION_NOT_FOUND]: Code.NotFound,
  [ErrorReason.UNIMPLEMENTED]: Code.Unimplemented,
  [ErrorReason.STORE_UNAVAILABLE]: Code.Unavailable,
};

/** apiError returns the error for reason with its code, a message and ErrorInfo metadata. */
export function apiError(
  reason: ErrorReason,
  message: string,
  metadata: Record<string, string> = {},
  extra: { desc: typeof StaleTokenDetailsSchema | typeof BadRequestSchema; value: object }[] = [],
): ConnectError {
  const details = [
    { desc: ErrorInfoSchema, value: { reason: ErrorReason[reason], domain: ERROR_DOMAIN, metadata } },
    ...extra,
  ] as ConstructorParameters<typeof ConnectError>[3];
  return new ConnectError(message, codes[reason] ?? Code.Internal, undefined, details);
}

/** Field is one offending field of a request. */
export interface Field {
  path: string;
  description: string;
}

/** badRequest is INVALID_ARGUMENT with one field violation per field. */
export function badRequest(fields: Field[]): ConnectError {
  const value: MessageInitShape<typeof BadRequestSchema> = {
    fieldViolations: fields.map((f) => ({ field: f.path, description: f.description })),
  };
  return apiError(
    ErrorReason.INVALID_ARGUMENT,
    "invalid argument: " + fields.map((f) => `${f.path}: ${f.description}`).join("; "),
    {},
    [{ desc: BadRequestSchema, value }],
  );
}

/**
 * staleToken is ABORTED with STALE_FENCING_TOKEN for election, naming the
 * current grant when known (a non-zero epoch), as the reference server
 * answers it.
 */
export function staleToken(election: string, current: FencingToken | undefined): ConnectError {
  const md: Record<string, string> = { election };
  const known = current !== undefined && current.epoch !== 0n;
  if (known) {
    md["current_epoch"] = current.epoch.toString();
    md["current_session_id"] = current.sessionId;
  }
  const value = { election, current: known ? { sessionId: current.sessionId, epoch: current.epoch } : undefined };
  return apiError(ErrorReason.STALE_FENCING_TOKEN, "stale fencing token for " + election, md, [
    { desc: StaleTokenDetailsSchema, value },
  ]);
}

/** itemError lists err as the refusal of the item at index of a batch call. */
export function itemError(index: number, err: unknown): ItemError {
  const ce = ConnectError.from(err);
  const info = ce.findDetails(ErrorInfoSchema).find((d) => d.domain === ERROR_DOMAIN);
  return create(ItemErrorSchema, {
    index,
    reason: reasonOf(ce),
    message: ce.rawMessage,
    metadata: info?.metadata ?? {},
  });
}
