// @jobplane/sdk: a client of jobplane's DispatcherService, a TaskExecutor
// (worker) running node functions, and the generated contract.

export { Client, newJobId, isGloballyTerminal } from "./client.js";
export type { ClientOptions, CallOptions, SubmitOptions, Submitted, JobGraphInit, SavepointOptions, SavepointsOptions } from "./client.js";
export {
  ERROR_DOMAIN,
  JobplaneError,
  NotLeaderError,
  StaleTokenError,
  DuplicateJobError,
  InvalidJobError,
  InvokableNotOfferedError,
  JobNotFoundError,
  JobTerminalError,
  JobNotTerminalError,
  SavepointNotFoundError,
  SavepointFailedError,
  CheckpointsUnsupportedError,
  reasonOf,
  retryDelayMs,
  toJobplaneError,
} from "./errors.js";
export type { Violation } from "./errors.js";
export { Worker, DEFAULT_MAX_TASK_VALUE_BYTES, DEFAULT_MAX_ACCUMULATORS } from "./worker.js";
export type { CheckpointFunction, State, Task, TaskFunction, TaskOutput, WorkerOptions } from "./worker.js";
export {
  DEFAULT_OUTPUT_BYTES,
  DEFAULT_OUTPUT_RETENTION_MS,
  DEFAULT_OUTPUT_ATTEMPTS,
  DEFAULT_OUTPUT_DISK_RETENTION_MS,
  DEFAULT_OUTPUT_MAX_BYTES,
} from "./output.js";
export { ErrorReason } from "../gen/jobplane/v1/error_pb.js";
export { JobStatus } from "../gen/jobplane/v1/job_pb.js";
export { ExecutionState } from "../gen/jobplane/v1/execution_pb.js";
export type { JobGraph } from "../gen/jobplane/v1/job_graph_pb.js";
export type { JobResult, JobSummary, SubtaskValue } from "../gen/jobplane/v1/job_pb.js";
export type { CheckpointCounts, CheckpointInfo, CheckpointStats, SavepointInfo } from "../gen/jobplane/v1/checkpoint_pb.js";
export type { ListCheckpointsResponse } from "../gen/jobplane/v1/dispatcher_service_pb.js";
