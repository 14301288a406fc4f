// Clients of the TaskExecutors' TaskExecutorService, one per address, kept
// for the life of the process (a TaskExecutor keeps its address while it
// lives; a dead one costs a failed call).
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { TaskExecutorService } from "./gen/jobplane/cluster/v1/task_executor_service_pb.js";
import { transportOptions } from "./settings.js";

export type TEClient = Client<typeof TaskExecutorService>;

const clients = new Map<string, TEClient>();

export function teClient(address: string): TEClient {
  let c = clients.get(address);
  if (!c) {
    c = createClient(TaskExecutorService, createConnectTransport(transportOptions(address)));
    clients.set(address, c);
  }
  return c;
}

/** Deadline of one call to a TaskExecutor. */
export const TE_CALL_MS = 3000;
