// jobmanager-ts: a JobManager process of jobplane, written from the contract.
//
//   node dist/main.js --listen 127.0.0.1:PORT --hastore http://127.0.0.1:STOREPORT [--listen-addr-file F]
//     [--task-lease DURATION] [--tls-cert F --tls-key F] [--tls-ca F]
//
// One listener serves Connect, gRPC and gRPC-Web, over HTTP/2 without TLS
// (h2c, prior knowledge: what the conformance runner speaks) and over
// HTTP/1.1: the first bytes of each connection say which. With --tls-cert
// and --tls-key it serves TLS instead, HTTP/2 or HTTP/1.1 by ALPN. It serves the
// public DispatcherService and the cluster protocol (ResourceManagerService,
// JobMasterService) of the same process.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { readFileSync, writeFileSync } from "node:fs";
import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { DispatcherService } from "./gen/jobplane/v1/dispatcher_service_pb.js";
import { Dispatcher } from "./dispatcher.js";
import { parseDurationMs, SETTINGS } from "./settings.js";
import { JobMasterService } from "./gen/jobplane/cluster/v1/job_master_service_pb.js";
import { ResourceManagerService } from "./gen/jobplane/cluster/v1/resource_manager_service_pb.js";
import { JobMasters } from "./jobmasters.js";
import { heartbeatIntervalMs, heartbeatTimeoutMs, ResourceManager } from "./resourcemanager.js";
import { ASKED_TTL_MS, Leadership, storeClient } from "./leadership.js";
import { LIMITS } from "./validate.js";
import { refuseTooLarge } from "./toolarge.js";
import { precheck } from "./prebody.js";

function usage(msg?: string): never {
  if (msg) console.error(msg);
  console.error(
    "usage: main.js --listen HOST:PORT --hastore URL [--listen-addr-file FILE] [--task-lease DURATION]\n" +
      "               [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]",
  );
  process.exit(2);
}

interface Args {
  listen: string;
  hastore: string;
  addrFile?: string;
  taskLease?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
}

const FLAGS = new Set(["listen", "hastore", "listen-addr-file", "task-lease", "tls-cert", "tls-key", "tls-ca"]);

function parseArgs(argv: string[]): Args {
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const m = /^--?([a-z-]+)(?:=(.*))?$/.exec(a);
    if (!m) usage(`unexpected argument ${a}`);
    const val = m[2] ?? argv[++i];
    if (val === undefined) usage(`${a} needs a value`);
    if (!FLAGS.has(m[1]!)) usage(`unknown flag ${a}`);
    out[m[1]!] = val;
  }
  if (!out["listen"] || !out["hastore"]) usage();
  if (!out["tls-cert"] !== !out["tls-key"]) usage("--tls-cert and --tls-key go together");
  return {
    listen: out["listen"], hastore: out["hastore"], addrFile: out["listen-addr-file"], taskLease: out["task-lease"],
    tlsCert: out["tls-cert"], tlsKey: out["tls-key"], tlsCa: out["tls-ca"],
  };
}

/** --task-lease: 0, or from the heartbeat timeout to 30 s (ServerTimings.task_lease). */
function taskLeaseMs(s: string | undefined): number {
  if (s === undefined) return SETTINGS.taskLeaseMs;
  const ms = parseDurationMs(s);
  if (ms === undefined) usage(`--task-lease: not a duration: ${s} (e.g. 10s, 1500ms, 0)`);
  const min = heartbeatTimeoutMs(ASKED_TTL_MS);
  if (ms !== 0 && (ms < min || ms > 30_000)) {
    usage(`--task-lease must be 0 (no leases), or from the heartbeat timeout (${min} ms) to 30s, not ${s}`);
  }
  return ms;
}

const log = (msg: string) => console.error(`${new Date().toISOString()} jobmanager-ts: ${msg}`);

// The HTTP/2 connection preface a client with prior knowledge sends first.
const H2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const [host, portStr] = splitHostPort(args.listen);
  SETTINGS.taskLeaseMs = taskLeaseMs(args.taskLease);
  if (args.tlsCa) SETTINGS.tlsCa = readFileSync(args.tlsCa);
  const tls = args.tlsCert && args.tlsKey ? { cert: readFileSync(args.tlsCert), key: readFileSync(args.tlsKey) } : undefined;

  const store = storeClient(args.hastore);
  // The two refer to each other: the Dispatcher serves under the
  // Leadership's grant; the Leadership runs the Dispatcher's recovery.
  let leadership: Leadership | undefined;
  let mastersRef: JobMasters | undefined;
  const rm = new ResourceManager(store, () => leadership!, log, SETTINGS.taskLeaseMs, (id) => mastersRef?.leaseGrantedAt(id));
  const masters = new JobMasters(
    () => heartbeatTimeoutMs(leadership!.sessionTtlMs),
    () => heartbeatIntervalMs(leadership!.sessionTtlMs),
    () => leadership!.leaseRemainingMs(),
    () => (leadership!.isLeader() ? SETTINGS.taskLeaseMs : 0),
  );
  mastersRef = masters;
  const dispatcher = new Dispatcher(store, () => leadership!, rm, masters, log);

  // connect-node's connectNodeAdapter, spelled out so that a Connect unary
  // JSON body can be checked for unknown fields first (src/jsonunknown.ts)
  // and handed to the framework already parsed.
  const router = createConnectRouter({
    readMaxBytes: LIMITS.maxRequestBytes,
    writeMaxBytes: LIMITS.maxResponseBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
  });
  router.service(DispatcherService, dispatcher.service());
  // The cluster protocol on the same listener (LeaderInfo.cluster_address left empty).
  router.service(ResourceManagerService, rm.service(dispatcher.guard));
  router.service(JobMasterService, masters.service(dispatcher.guard));
  const paths = new Map(router.handlers.map((h) => [h.requestPath, h]));
  const handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
    void serve(req, res).catch((e) => log(`request failed: ${String(e)}`));
  };
  const serve = async (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
    const uHandler = paths.get(req.url?.split("?", 2)[0] ?? "");
    if (!uHandler) {
      (res as http.ServerResponse).writeHead(404);
      res.end();
      return;
    }
    if (refuseTooLarge(req, res, LIMITS.maxRequestBytes)) return;
    // The body read, bounded, unframed, decompressed and decoded here first,
    // so that every refusal carries the contract's ErrorInfo (src/prebody.ts).
    const pre = await precheck(req, res, {
      input: uHandler.method.input,
      limit: LIMITS.maxRequestBytes,
      dispatcher: uHandler.service.typeName === DispatcherService.typeName,
      notLeader: () => dispatcher.notLeaderError(),
    });
    if (pre.answered) return;
    const uReq = universalRequestFromNodeRequest(req, res as http.ServerResponse, pre.parsedJson, undefined);
    if (pre.bytes) {
      const bytes = pre.bytes;
      uReq.body = (async function* () {
        yield bytes;
      })();
    }
    try {
      await universalResponseToNodeResponse(await uHandler(uReq), res);
    } catch (reason) {
      if (ConnectError.from(reason).code !== Code.Aborted) log(`rpc ${uHandler.method.name} failed: ${String(reason)}`);
    }
  };
  let server: net.Server;
  if (tls) {
    // TLS: HTTP/2 or HTTP/1.1, as ALPN chooses.
    server = http2.createSecureServer({ ...tls, allowHTTP1: true, ALPNProtocols: ["h2", "http/1.1"] }, handler);
  } else {
  const h2 = http2.createServer({}, handler);
  const h1 = http.createServer(handler);
  // Route each connection by its first bytes: the HTTP/2 preface, or HTTP/1.1.
  server = net.createServer((sock) => {
    sock.once("readable", () => {
      const head: Buffer | null = sock.read(Math.min(H2_PREFACE.length, sock.readableLength)) ?? sock.read();
      if (!head) return sock.destroy();
      sock.unshift(head);
      const isH2 = head.equals(H2_PREFACE.subarray(0, head.length));
      (isH2 ? h2 : h1).emit("connection", sock);
    });
  });
  }
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(Number(portStr), host, resolve);
  });
  const addr = server.address() as net.AddressInfo;
  const hostPort = `${addr.address.includes(":") ? `[${addr.address}]` : addr.address}:${addr.port}`;
  const baseUrl = `${tls ? "https" : "http"}://${hostPort}`;
  if (args.addrFile) writeFileSync(args.addrFile, hostPort + "\n");
  log(`serving at ${baseUrl}, HA store ${args.hastore}, task lease ${SETTINGS.taskLeaseMs} ms`);

  leadership = new Leadership(store, baseUrl, {
    recover: (fence) => dispatcher.recover(fence),
    lost: () => dispatcher.lost(),
    jobGranted: (jobId, fence) => dispatcher.jobGranted(jobId, fence),
    jobLost: (jobId, token) => dispatcher.jobLost(jobId, token),
  }, log);
  leadership.start();

  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    log(`${sig}: stopping`);
    server.close();
    await leadership!.stop();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

function splitHostPort(s: string): [string, string] {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(s);
  if (!m) usage(`--listen must be HOST:PORT, not ${s}`);
  return [m[1]!, m[2]!];
}

main().catch((e) => {
  log(`fatal: ${e instanceof Error ? e.stack : String(e)}`);
  process.exit(1);
});
