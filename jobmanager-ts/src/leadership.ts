// The process's HA-store session and its leadership of `jobmanager`
// (ha_store_service.proto: sessions, elections; leadership.proto:
// FencingToken and "When a leader counts as deposed").
//
// One session at a time: opened, renewed with KeepAlive, its grants followed
// on one WatchSession stream. The process campaigns in `jobmanager` without
// an address, runs the Dispatcher's recovery when granted, and only then
// publishes its address with ConfirmLeadership, so that whoever finds the
// address finds a Dispatcher ready to answer.
import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { performance } from "node:perf_hooks";
import { HAStoreService } from "./gen/jobplane/hastore/v1/ha_store_service_pb.js";
import { FenceSchema, type Fence, type FencingToken, type LeaderInfo } from "./gen/jobplane/v1/leadership_pb.js";
import { reasonOf } from "./errors.js";
import { transportOptions } from "./settings.js";

/** The session TTL this process asks the store for. */
export const ASKED_TTL_MS = 2000;
/** The most a granted session TTL may be (ServerTimings.session_ttl). */
const MAX_SESSION_TTL_MS = 10_000;

export const ELECTION = "jobmanager";

export type HAClient = Client<typeof HAStoreService>;

export function storeClient(baseUrl: string): HAClient {
  // The runner's store serves Connect over h2c and HTTP/1.1; h2c lets the
  // WatchSession stream and the unary calls share one connection.
  return createClient(HAStoreService, createConnectTransport(transportOptions(baseUrl)));
}

/** What the Dispatcher does when this process gains or loses `jobmanager`. */
export interface LeaderCallbacks {
  /** Recover under the new grant; resolves when the Dispatcher may serve. */
  recover(fence: Fence): Promise<void>;
  /** The leadership ended: stop acting at once. */
  lost(): void;
  /** This session was granted a job's election `job/<jobId>`. */
  jobGranted(jobId: string, fence: Fence): void;
  /** A grant of `job/<jobId>` ended (revoked, or missing from a snapshot). */
  jobLost(jobId: string, token: FencingToken): void;
}

const JOB_PREFIX = "job/";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Session {
  id: string;
  ttlMs: number;
  ended: boolean;
  abort: AbortController;
  /**
   * The job elections this session sent a Campaign in and has not withdrawn
   * from since (Withdraw answered): each may hold a candidacy that stands,
   * answered or not (a Campaign whose answer was lost may have landed).
   */
  campaigned: Set<string>;
}

export class Leadership {
  /** The TTL asked for; the store may raise it (see `sessionTtlMs`). */
  readonly requestedTtlMs = ASKED_TTL_MS;
  private session: Session | undefined;
  private token: FencingToken | undefined;
  private ready = false;
  /** Monotonic send time of the last acknowledged KeepAlive (or OpenSession). */
  private lastAckSend = -Infinity;
  /** Grants up to this epoch are over for us, whatever the store reports later. */
  private deadEpoch = 0n;
  private stopped = false;
  /** The job elections this session campaigns in (waiting or granted). */
  private readonly jobCandidacies = new Set<string>();
  private leaderCache: { at: number; info: LeaderInfo | undefined } = { at: -Infinity, info: undefined };
  /** The job campaigns in progress (their Campaign calls may be on their way). */
  private readonly campaigning = new Map<string, Promise<void>>();
  /** The job grants this session holds, as WatchSession reported them. */
  private readonly jobGrants = new Map<string, FencingToken>();

  constructor(
    readonly client: HAClient,
    readonly address: string,
    private readonly cb: LeaderCallbacks,
    private readonly log: (msg: string) => void,
  ) {}

  /** Whether `t` is this process's current grant of `jobmanager`. */
  holds(t: FencingToken | undefined): boolean {
    const c = this.token;
    return !!c && !!t && c.epoch === t.epoch && c.sessionId === t.sessionId;
  }

  /** The TTL of the current session (the granted one), for ServerTimings. */
  get sessionTtlMs(): number {
    return this.session?.ttlMs ?? this.requestedTtlMs;
  }

  /** The margin for clock drift: a tenth of the TTL (FencingToken rule 1). */
  private marginMs(): number {
    return this.sessionTtlMs / 10;
  }

  /**
   * Whether this process may act as leader now: granted, recovered, and
   * within the last acknowledged KeepAlive's send time + TTL - margin, on
   * the monotonic clock. Checked as each call answers.
   */
  isLeader(): boolean {
    if (!this.token || !this.ready || !this.session || this.session.ended) return false;
    return performance.now() < this.lastAckSend + this.sessionTtlMs - this.marginMs();
  }

  /** How long this leadership certainly holds from now (0 when it does not). */
  leaseRemainingMs(): number {
    if (!this.isLeader()) return 0;
    return this.lastAckSend + this.sessionTtlMs - this.marginMs() - performance.now();
  }

  /** The leader as the store shows it, for NOT_LEADER answers (cached briefly). */
  async knownLeader(): Promise<LeaderInfo | undefined> {
    if (performance.now() - this.leaderCache.at < 300) return this.leaderCache.info;
    try {
      const r = await this.client.getLeader({ election: ELECTION }, { timeoutMs: 1000 });
      this.leaderCache = { at: performance.now(), info: r.leader?.token ? r.leader : undefined };
    } catch {
      this.leaderCache = { at: performance.now(), info: undefined };
    }
    return this.leaderCache.info;
  }

  start(): void {
    void this.run();
    // Rule 1 is checked as calls answer; this timer also makes the process
    // step down (and campaign again) once its lease certainly lapsed.
    setInterval(() => {
      if (this.token && performance.now() >= this.lastAckSend + this.sessionTtlMs - this.marginMs()) {
        this.stepDown("lease lapsed");
      }
    }, 50).unref();
  }

  /** Graceful stop: close the session so a standby takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    const s = this.session;
    this.stepDown("stopping", false);
    if (s) {
      s.abort.abort();
      await this.client.closeSession({ sessionId: s.id }, { timeoutMs: 1000 }).catch(() => undefined);
    }
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      let s: Session;
      const sent = performance.now();
      try {
        const r = await this.client.openSession(
          { ttl: durationFromMs(this.requestedTtlMs) },
          { timeoutMs: this.requestedTtlMs },
        );
        const ttlMs = r.ttl ? Number(r.ttl.seconds) * 1000 + r.ttl.nanos / 1e6 : this.requestedTtlMs;
        s = { id: r.sessionId, ttlMs, ended: false, abort: new AbortController(), campaigned: new Set() };
      } catch (e) {
        this.log(`OpenSession failed: ${String(e)}`);
        await sleep(300);
        continue;
      }
      if (s.ttlMs > MAX_SESSION_TTL_MS) {
        // ServerTimings.session_ttl: a server whose store grants more than
        // 10 s cannot keep the bound and MUST NOT serve.
        this.log(`refusing to serve: the HA store granted a session TTL of ${s.ttlMs} ms, over the ${MAX_SESSION_TTL_MS} ms ServerTimings.session_ttl allows`);
        await this.client.closeSession({ sessionId: s.id }, { timeoutMs: 1000 }).catch(() => undefined);
        process.exit(2);
      }
      this.session = s;
      this.lastAckSend = sent;
      this.log(`session ${s.id} opened, ttl ${s.ttlMs} ms`);
      const ended = Promise.all([this.keepAlive(s), this.watch(s)]);
      await this.campaign(s);
      await ended;
      this.log(`session ${s.id} ended`);
    }
  }

  private endSession(s: Session, why: string): void {
    if (s.ended) return;
    s.ended = true;
    s.abort.abort();
    if (this.session === s) this.stepDown(`session ended: ${why}`, false);
  }

  /**
   * Sends a KeepAlive every TTL/4 without waiting for the previous one's
   * answer (each bounded by TTL/2, at most two in flight): one held by the
   * store or the network delays no renewal, so the leadership's lease (and
   * the `lease_remaining` TaskExecutors stop their attempts by, without a
   * task lease) does not lapse for one slow call.
   */
  private async keepAlive(s: Session): Promise<void> {
    let inFlight = 0;
    const one = async (): Promise<void> => {
      const sent = performance.now();
      inFlight++;
      try {
        await this.client.keepAlive({ sessionId: s.id }, { timeoutMs: s.ttlMs / 2, signal: s.abort.signal });
        if (sent > this.lastAckSend) this.lastAckSend = sent;
      } catch (e) {
        if (s.ended) return;
        const { code, reason } = reasonOf(e);
        if (code === Code.NotFound || reason === "SESSION_NOT_FOUND") {
          this.endSession(s, "KeepAlive: SESSION_NOT_FOUND");
          return;
        }
        // Transient: the next one retries; rule 1 ends the leadership if it lasts.
        if (performance.now() > this.lastAckSend + s.ttlMs * 2) {
          // Past any chance the store kept the session: start over.
          this.endSession(s, `KeepAlive failing: ${String(e)}`);
        }
      } finally {
        inFlight--;
      }
    };
    while (!s.ended && !this.stopped) {
      await sleep(s.ttlMs / 4);
      if (s.ended || this.stopped) return;
      if (inFlight >= 2) continue;
      void one();
    }
  }

  /** Follows the session's grants; reconnects, and resynchronizes from each snapshot. */
  private async watch(s: Session): Promise<void> {
    while (!s.ended && !this.stopped) {
      let inSnapshot = true;
      let snapshotHasOurs = false;
      const snapshotJobs = new Set<string>();
      try {
        for await (const ev of this.client.watchSession({ sessionId: s.id }, { signal: s.abort.signal })) {
          const e = ev.event;
          if (e.case === "granted") {
            if (e.value.election.startsWith(JOB_PREFIX) && e.value.token) {
              const jobId = e.value.election.slice(JOB_PREFIX.length);
              if (inSnapshot) snapshotJobs.add(jobId);
              this.jobGrant(s, jobId, e.value.token);
              continue;
            }
            if (e.value.election !== ELECTION || !e.value.token) continue;
            const t = e.value.token;
            if (inSnapshot && this.token && t.epoch === this.token.epoch) snapshotHasOurs = true;
            this.granted(s, t);
          } else if (e.case === "revoked") {
            if (e.value.election.startsWith(JOB_PREFIX)) {
              this.jobRevoked(e.value.election.slice(JOB_PREFIX.length), e.value.token);
              continue;
            }
            if (e.value.election !== ELECTION) continue;
            if (this.token && e.value.token && e.value.token.epoch === this.token.epoch) {
              this.stepDown(`revoked (${e.value.reason})`);
            }
          } else if (e.case === "snapshotEnd") {
            inSnapshot = false;
            if (this.token && !snapshotHasOurs) this.stepDown("not in the WatchSession snapshot");
            for (const [jobId, t] of [...this.jobGrants]) if (!snapshotJobs.has(jobId)) this.jobRevoked(jobId, t);
          }
        }
        // A server stream that ends without error: reconnect.
      } catch (err) {
        if (s.ended) return;
        const { code, reason } = reasonOf(err);
        if (code === Code.NotFound || reason === "SESSION_NOT_FOUND") {
          this.endSession(s, "WatchSession: SESSION_NOT_FOUND");
          return;
        }
        this.log(`WatchSession broke: ${String(err)}; reconnecting`);
      }
      await sleep(100);
    }
  }

  private async campaign(s: Session): Promise<void> {
    while (!s.ended && !this.stopped) {
      try {
        // No address yet: it is published once recovery is done.
        await this.client.campaign({ election: ELECTION, sessionId: s.id, address: "" }, { timeoutMs: 2000, signal: s.abort.signal });
        return;
      } catch (e) {
        const { code, reason } = reasonOf(e);
        if (code === Code.NotFound || reason === "SESSION_NOT_FOUND") {
          this.endSession(s, "Campaign: SESSION_NOT_FOUND");
          return;
        }
        this.log(`Campaign failed: ${String(e)}; retrying`);
        await sleep(200);
      }
    }
  }

  private granted(s: Session, t: FencingToken): void {
    if (t.sessionId !== s.id || t.epoch <= this.deadEpoch) return;
    if (this.token && this.token.epoch === t.epoch) return; // the grant we hold
    if (this.token) this.stepDown("a newer grant replaced ours", false);
    this.token = t;
    this.ready = false;
    this.log(`granted ${ELECTION} epoch ${t.epoch}`);
    void this.takeOver(s, t);
  }

  /** Recovery, then publish the address; under this grant only. */
  private async takeOver(s: Session, t: FencingToken): Promise<void> {
    const fence = create(FenceSchema, { election: ELECTION, token: t });
    while (this.token === t && !s.ended) {
      try {
        await this.cb.recover(fence);
        if (this.token !== t) return;
        await this.client.confirmLeadership({ fence, address: this.address }, { timeoutMs: 2000 });
        if (this.token !== t) return;
        this.ready = true;
        this.log(`leading ${ELECTION} at ${this.address}`);
        return;
      } catch (e) {
        const { reason } = reasonOf(e);
        if (reason === "STALE_FENCING_TOKEN" || reason === "NOT_LEADER") {
          this.staleWrite(t);
          return;
        }
        this.log(`recovery failed: ${String(e)}; retrying`);
        await sleep(300);
      }
    }
  }

  /**
   * Campaigns in `job/<jobId>`, only while leading `jobmanager` (the jobs'
   * leaderships follow it: DispatcherService's comment). No address: it is
   * published on the grant (ConfirmLeadership), after the result check.
   */
  async campaignJob(jobId: string): Promise<void> {
    const p = this.campaignJobOnce(jobId);
    this.campaigning.set(jobId, p);
    try {
      await p;
    } finally {
      if (this.campaigning.get(jobId) === p) this.campaigning.delete(jobId);
    }
  }

  /**
   * Resolves once no Campaign call of the job is on its way: a job's result
   * is written only after, so that no campaign lands after the result.
   */
  async campaignSettled(jobId: string): Promise<void> {
    await this.campaigning.get(jobId)?.catch(() => undefined);
  }

  private async campaignJobOnce(jobId: string): Promise<void> {
    const s = this.session;
    const t = this.token;
    if (!s || !t) return;
    this.jobCandidacies.add(jobId);
    for (let i = 0; i < 10 && this.token === t && !s.ended && this.jobCandidacies.has(jobId); i++) {
      try {
        s.campaigned.add(jobId);
        await this.client.campaign({ election: JOB_PREFIX + jobId, sessionId: s.id, address: "" }, { timeoutMs: 2000, signal: s.abort.signal });
        return;
      } catch (e) {
        this.log(`Campaign job/${jobId} failed: ${String(e)}; retrying`);
        await sleep(200);
      }
    }
  }

  /**
   * The job's result is being written: from now on nothing campaigns for it
   * (no retry, no campaign after a revocation); endCandidacy then ends a
   * candidacy that is not granted before the result, withdrawJob a granted
   * one after it.
   */
  retireJob(jobId: string): void {
    this.jobCandidacies.delete(jobId);
  }

  /**
   * Before a job's result is written (CreateDirtyJobResult: "the server MUST
   * end every candidacy of its own in `job/<job_id>` that is not granted
   * (Withdraw, answered)"): withdraws this session's candidacy in
   * `job/<jobId>` unless WatchSession reported it granted, retrying until a
   * Withdraw is answered. Resolves at once when this session sent no
   * Campaign there (or withdrew since), and when the session ended: nothing
   * of an ended session stands. Call after retireJob and campaignSettled,
   * so that no Campaign of ours follows the Withdraw.
   */
  async endCandidacy(jobId: string): Promise<void> {
    for (;;) {
      const s = this.session;
      if (!s || s.ended || this.stopped || !s.campaigned.has(jobId)) return;
      // A granted candidacy keeps its JobMaster's grant until the result;
      // withdrawJob resigns it after.
      if (this.jobGrants.has(jobId)) return;
      try {
        await this.client.withdraw({ election: JOB_PREFIX + jobId, sessionId: s.id }, { timeoutMs: 2000, signal: s.abort.signal });
        s.campaigned.delete(jobId);
        return;
      } catch (e) {
        if (s.ended) return;
        const { code, reason } = reasonOf(e);
        if (code === Code.NotFound || reason === "SESSION_NOT_FOUND") return;
        this.log(`Withdraw job/${jobId} before its result failed: ${String(e)}; retrying`);
        await sleep(200);
      }
    }
  }

  /** Ends this session's candidacy (waiting or granted) in `job/<jobId>`. */
  async withdrawJob(jobId: string): Promise<void> {
    this.jobCandidacies.delete(jobId);
    this.jobGrants.delete(jobId);
    const s = this.session;
    if (!s || s.ended) return;
    for (let i = 0; i < 5; i++) {
      try {
        await this.client.withdraw({ election: JOB_PREFIX + jobId, sessionId: s.id }, { timeoutMs: 2000 });
        // Unless a Campaign of the job was sent since (it may stand again).
        if (!this.jobCandidacies.has(jobId)) s.campaigned.delete(jobId);
        return;
      } catch (e) {
        if (reasonOf(e).reason === "SESSION_NOT_FOUND") return;
        await sleep(200);
      }
    }
  }

  /**
   * A job's grant ended for us: its JobMaster stops at once, and, while the
   * job still wants leading, the session campaigns again for a new grant.
   */
  private jobRevoked(jobId: string, t: FencingToken | undefined): void {
    const held = this.jobGrants.get(jobId);
    if (!held || (t && t.epoch !== held.epoch)) return;
    this.jobGrants.delete(jobId);
    this.log(`job/${jobId} epoch ${held.epoch} ended`);
    this.cb.jobLost(jobId, held);
    if (this.token && this.jobCandidacies.has(jobId)) void this.campaignJob(jobId);
  }

  private jobGrant(s: Session, jobId: string, t: FencingToken): void {
    if (t.sessionId !== s.id) return;
    const held = this.jobGrants.get(jobId);
    if (held && held.epoch === t.epoch) return; // the grant we hold, again in a snapshot
    if (held) this.cb.jobLost(jobId, held);
    this.jobGrants.set(jobId, t);
    if (!this.token || !this.jobCandidacies.has(jobId)) {
      // Not leading `jobmanager` (or no longer wanting the job): give it back.
      void this.withdrawJob(jobId);
      return;
    }
    this.cb.jobGranted(jobId, create(FenceSchema, { election: JOB_PREFIX + jobId, token: t }));
  }

  /** A fenced write was refused as stale: the grant is over (FencingToken rule 3). */
  staleWrite(t: FencingToken): void {
    if (this.token && this.token.epoch === t.epoch) this.stepDown("a write was refused as stale");
  }

  /**
   * Ends our leadership for this process at once, and, unless the session is
   * gone, resigns the grant (harmless if it already ended) and campaigns
   * again for a new one: an ended grant is never used again.
   */
  stepDown(why: string, recampaign = true): void {
    const t = this.token;
    if (!t) return;
    this.token = undefined;
    this.ready = false;
    if (t.epoch > this.deadEpoch) this.deadEpoch = t.epoch;
    this.log(`stepping down from ${ELECTION} epoch ${t.epoch}: ${why}`);
    this.jobGrants.clear();
    this.cb.lost();
    // The jobs' leaderships follow `jobmanager`: resign them all at once,
    // even while the session lives on.
    for (const jobId of [...this.jobCandidacies]) void this.withdrawJob(jobId);
    const s = this.session;
    if (!recampaign || !s || s.ended || this.stopped) return;
    void (async () => {
      await this.client
        .resign({ fence: { election: ELECTION, token: t } }, { timeoutMs: 2000, signal: s.abort.signal })
        .catch(() => undefined);
      await this.campaign(s);
    })();
  }
}
