// Test harness: an HA store as a TaskExecutor sees it, serving only
// HAStoreService.ObserveLeader and GetLeader of "jobmanager" and of the
// jobs' elections ("job/<job_id>"), whose grants the test makes. Its leaders publish no address, so a TaskExecutor following it
// registers nowhere, and the test makes the ResourceManager's calls itself
// under the granted token (since contract 1.2 a TaskExecutor takes a
// ResourceManager token only once the store shows it as the grant, and a
// JobMaster token on a JobMaster's own call only once the store shows it
// as the job's grant).

import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { GetLeaderResponseSchema, HAStoreService, ObserveLeaderResponseSchema } from "../gen/jobplane/hastore/v1/ha_store_service_pb.js";
import { ErrorReason } from "../gen/jobplane/v1/error_pb.js";
import { apiError } from "../src/fence.js";

/** Token is a grant of an election. */
export interface Token {
  sessionId: string;
  epoch: bigint;
}

/** Leaders is the running store. */
export interface Leaders {
  /** Its base URL, for WorkerOptions.hastore or `--hastore`. */
  url: string;
  /** grant makes t the grant of "jobmanager", as a Campaign that won would. */
  grant(t: Token): void;
  /** grantJob makes t the grant of "job/<jobId>", as the JobMaster's Campaign that won would. */
  grantJob(jobId: string, t: Token): void;
  /** jobReads counts the reads of jobs' elections. */
  jobReads(): number;
  /** fail ends every observation, and refuses new ones, until heal: a store without a quorum. */
  fail(): void;
  /** heal ends fail. */
  heal(): void;
  /** close stops it. */
  close(): Promise<void>;
}

/** startLeaders serves a store whose "jobmanager" is granted to first. */
export async function startLeaders(first: Token): Promise<Leaders> {
  let current = first;
  const jobs = new Map<string, Token>();
  let reads = 0;
  let failed = false;
  let wake: (() => void)[] = [];
  const changed = () => {
    for (const w of wake) w();
    wake = [];
  };
  const unavailable = () => apiError(ErrorReason.STORE_UNAVAILABLE, "leaders: the store cannot be observed");
  const routes = (router: ConnectRouter) =>
    router.service(HAStoreService, {
      getLeader(req) {
        if (failed) throw unavailable();
        if (req.election.startsWith("job/")) reads++;
        const token = req.election === "jobmanager" ? current : jobs.get(req.election);
        return create(GetLeaderResponseSchema, { leader: { election: req.election, token } });
      },
      async *observeLeader(req, ctx) {
        const isJob = req.election.startsWith("job/");
        if (isJob) reads++;
        let sent: Token | undefined;
        let first = true;
        while (!ctx.signal.aborted) {
          if (failed) throw unavailable();
          const now = isJob ? jobs.get(req.election) : current;
          if ((req.election === "jobmanager" || isJob) && (first || sent !== now)) {
            sent = now;
            first = false;
            yield create(ObserveLeaderResponseSchema, { event: { case: "leader", value: { election: req.election, token: now } } });
          } else {
            yield create(ObserveLeaderResponseSchema, { event: { case: "heartbeat", value: {} } });
          }
          // The next change, or a heartbeat a second later (what
          // electionrpc's observers expect of a quiet stream).
          await new Promise<void>((resolve) => {
            const t = setTimeout(done, 1000);
            ctx.signal.addEventListener("abort", done, { once: true });
            wake.push(done);
            function done() {
              clearTimeout(t);
              ctx.signal.removeEventListener("abort", done);
              resolve();
            }
          });
        }
      },
    });
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    grant(t) {
      current = t;
      changed();
    },
    grantJob(jobId, t) {
      jobs.set("job/" + jobId, t);
      changed();
    },
    jobReads() {
      return reads;
    },
    fail() {
      failed = true;
      changed();
    },
    heal() {
      failed = false;
    },
    close() {
      changed();
      for (const s of sessions) s.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
