// ResourceManagerService (resource_manager_service.proto): the cluster's
// TaskExecutors and their slots, handed to JobMasters by their declared
// requirements.
//
// It runs under this process's grant of `jobmanager` and its token; what it
// knows (registrations, requirements) belongs to one grant and is dropped
// when the grant ends: TaskExecutors and JobMasters register again with the
// next leader. Allocation is the simplest strategy: jobs in registration
// order, each given free slots (of TaskExecutors offering all its
// invokables, when some do) until its declaration is met.
import { Code, type ServiceImpl } from "@connectrpc/connect";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { ResourceManagerService, DeclareResourceRequirementsRequestSchema, DisconnectJobMasterRequestSchema, RegisterJobMasterRequestSchema, type DeclareResourceRequirementsRequest, type DisconnectJobMasterRequest, type RegisterJobMasterRequest, type ResourceManagerServiceHeartbeatRequest, type ResourceManagerServiceRegisterTaskExecutorRequest } from "./gen/jobplane/cluster/v1/resource_manager_service_pb.js";
import type { ResourceProfile, SlotReport } from "./gen/jobplane/cluster/v1/slot_pb.js";
import { LeaderInfoSchema, type FencingToken, type LeaderInfo } from "./gen/jobplane/v1/leadership_pb.js";
import { guardAll, invalidArgument, jpError, notLeader, reasonOf, type Guard } from "./errors.js";
import { judge, malformedError, notRegistered, sameToken, staleError } from "./fencing.js";
import { ASKED_TTL_MS, ELECTION, type HAClient, type Leadership } from "./leadership.js";
import { teClient, TE_CALL_MS } from "./teclient.js";

/**
 * The heartbeat timeout of the cluster protocol
 * (ServerTimings.task_executor_heartbeat_timeout): three fifths of the TTL
 * asked for, which every grant is at least, so that it stays under two
 * thirds of the granted TTL whatever the store grants.
 */
export function heartbeatTimeoutMs(ttlMs: number): number {
  return Math.floor((Math.min(ttlMs, ASKED_TTL_MS) * 3) / 5);
}
/** How often TaskExecutors heartbeat: a quarter of the timeout. */
export function heartbeatIntervalMs(ttlMs: number): number {
  return Math.floor(heartbeatTimeoutMs(ttlMs) / 4);
}

interface Slot {
  index: number;
  profile: ResourceProfile | undefined;
  allocationId: string;
  jobId: string;
  /** Our own RequestSlot in flight or answered: the report must catch up before it counts. */
  requested?: { version: bigint; at: number };
  /** After a refused RequestSlot, the slot is not tried again before this. */
  blockedUntil: number;
}

interface RegisteredTE {
  id: string;
  address: string;
  registrationId: string;
  invokables: string[];
  slots: Slot[];
  lastHeard: number;
  reportVersion: bigint;
  /** The JobMaster token last told to this registration per job (Heartbeat answer's job_masters). */
  toldJobMasters: Map<string, string>;
}

interface JobRegistration {
  jobId: string;
  token: FencingToken;
  address: string;
  required: number;
  invokables: string[];
  order: number;
}

/**
 * The TaskExecutor membership as this ResourceManager's grant knows it
 * (HAStoreService "TaskExecutor membership"): read from the store as the
 * grant begins, then kept by its own AddTaskExecutor and RemoveTaskExecutor.
 */
interface Membership {
  /** The members; undefined until the store was read (or for good, when the store keeps no membership). */
  ids: Set<string> | undefined;
  /** Members not registered here, since when (monotonic): removed once every lease they could hold has ended. */
  gone: Map<string, number>;
  /** The store answered a membership call UNIMPLEMENTED: no membership for this grant. */
  unsupported: boolean;
  /** When this grant began (monotonic): a predecessor's leases ended by then plus the task lease. */
  since: number;
}

/** A pending RequestSlot counts until a report at least as new as its answer shows otherwise (or, unversioned, 2 s). */
const UNVERSIONED_GRACE_MS = 2000;

export class ResourceManager {
  /** The `jobmanager` grant this ResourceManager serves under; unset while not leading. */
  private token: FencingToken | undefined;
  private tes = new Map<string, RegisteredTE>();
  private jobs = new Map<string, JobRegistration>();
  /** The newest JobMaster token seen per job, registered or refused as stale. */
  private newestJobToken = new Map<string, FencingToken>();
  private order = 0;
  private reconciling = false;
  private again = false;
  private membership: Membership = { ids: undefined, gone: new Map(), unsupported: true, since: 0 };
  /** A removal in flight per member. */
  private removing = new Set<string>();

  constructor(
    private readonly store: HAClient,
    private readonly leadership: () => Leadership,
    private readonly log: (msg: string) => void,
    /** The task lease this process grants (ServerTimings.task_lease); 0 for none. */
    private readonly taskLeaseMs: number,
    /** When this process's JobMasters last granted a TaskExecutor a task lease (monotonic), if they did. */
    private readonly leaseGrantedAt: (teId: string) => number | undefined,
  ) {
    setInterval(() => this.tick(), 100).unref();
  }

  /** A new grant of `jobmanager`: everything starts empty; the membership is read from the store. */
  lead(token: FencingToken): void {
    this.token = token;
    this.tes.clear();
    this.jobs.clear();
    this.newestJobToken.clear();
    this.membership = { ids: undefined, gone: new Map(), unsupported: false, since: performance.now() };
    void this.readMembership(token, this.membership);
  }

  lost(): void {
    this.token = undefined;
    this.tes.clear();
    this.jobs.clear();
    this.newestJobToken.clear();
    this.membership = { ids: undefined, gone: new Map(), unsupported: true, since: 0 };
  }

  // ---- the TaskExecutor membership --------------------------------------------

  /** Reads every member (ListTaskExecutors), retried until it succeeds, the store proves to keep none, or the grant ends. */
  private async readMembership(token: FencingToken, m: Membership): Promise<void> {
    while (this.token === token && this.membership === m) {
      try {
        const ids = new Set<string>();
        let pageToken = "";
        do {
          const r = await this.store.listTaskExecutors({ pageToken }, { timeoutMs: 3000 });
          for (const id of r.taskExecutorIds) ids.add(id);
          pageToken = r.nextPageToken;
        } while (pageToken);
        if (this.token !== token || this.membership !== m) return;
        // Added here while the read was on its way: members too.
        for (const id of m.gone.keys()) ids.add(id);
        for (const id of this.tes.keys()) ids.add(id);
        for (const id of ids) if (!this.tes.has(id) && !m.gone.has(id)) m.gone.set(id, m.since);
        m.ids = ids;
        this.log(`TaskExecutor membership: ${ids.size} members`);
        return;
      } catch (e) {
        if (reasonOf(e).code === Code.Unimplemented) {
          m.unsupported = true;
          this.log("the HA store keeps no TaskExecutor membership: takeovers wait out the task lease");
          return;
        }
        this.log(`ListTaskExecutors: ${String(e)}`);
        await new Promise((r) => setTimeout(r, 300));
      }
    }
  }

  /**
   * The members, for a JobMaster that takes a job over: undefined while
   * unknown (not read yet, or the store keeps none), when it must wait out
   * the task lease.
   */
  members(): Set<string> | undefined {
    return this.leading() && !this.membership.unsupported ? this.membership.ids : undefined;
  }

  /** Records a TaskExecutor as a member before its registration is answered (AddTaskExecutor, fenced by our grant). */
  private async addMember(cur: FencingToken, teId: string): Promise<void> {
    const m = this.membership;
    m.gone.delete(teId);
    if (m.ids?.has(teId) && !this.removing.has(teId)) return; // a member already
    if (m.unsupported || this.removing.has(teId)) {
      // A removal in flight: the add below must land after it.
      while (this.removing.has(teId)) await new Promise((r) => setTimeout(r, 20));
      if (m.unsupported) return;
    }
    try {
      await this.store.addTaskExecutor({ fence: { election: ELECTION, token: cur }, taskExecutorId: teId }, { timeoutMs: 3000 });
    } catch (e) {
      const { code, reason } = reasonOf(e);
      if (code === Code.Unimplemented) {
        m.unsupported = true;
        this.log("the HA store keeps no TaskExecutor membership: takeovers wait out the task lease");
        return;
      }
      if (reason === "STALE_FENCING_TOKEN") {
        this.leadership().staleWrite(cur);
        throw await this.notLeaderError();
      }
      throw jpError(Code.Unavailable, "STORE_UNAVAILABLE", `the TaskExecutor could not be recorded in the HA store: ${String(e)}`, {
        task_executor_id: teId,
      });
    }
    m.ids?.add(teId);
  }

  /**
   * Removes members gone (not registered here) once every task lease they
   * could hold has ended: the predecessor's (by this grant's start plus the
   * lease) and our JobMasters' (by their last grant plus the lease), with a
   * heartbeat interval to spare.
   */
  private removeGone(cur: FencingToken, now: number): void {
    const m = this.membership;
    if (m.unsupported || m.ids === undefined) return;
    const lease = Math.max(this.taskLeaseMs, heartbeatTimeoutMs(this.ttl)) + heartbeatIntervalMs(this.ttl);
    for (const [id, since] of m.gone) {
      if (this.tes.has(id)) {
        m.gone.delete(id);
        continue;
      }
      const last = Math.max(since, m.since, this.leaseGrantedAt(id) ?? 0);
      if (now < last + lease || this.removing.has(id)) continue;
      this.removing.add(id);
      void this.store
        .removeTaskExecutor({ fence: { election: ELECTION, token: cur }, taskExecutorId: id }, { timeoutMs: 3000 })
        .then(
          () => {
            if (this.membership !== m || this.tes.has(id)) return;
            m.gone.delete(id);
            m.ids?.delete(id);
            this.log(`TaskExecutor ${id} removed from the membership`);
          },
          (e) => {
            const { code, reason } = reasonOf(e);
            if (code === Code.Unimplemented) m.unsupported = true;
            else if (reason === "STALE_FENCING_TOKEN") this.leadership().staleWrite(cur);
            else this.log(`RemoveTaskExecutor ${id}: ${String(e)}`);
          },
        )
        .finally(() => this.removing.delete(id));
    }
  }

  private leading(): FencingToken | undefined {
    return this.token && this.leadership().isLeader() ? this.token : undefined;
  }

  private async notLeaderError() {
    return notLeader(await this.leadership().knownLeader());
  }

  private get ttl(): number {
    return this.leadership().sessionTtlMs;
  }

  /**
   * Judges a ResourceManager token a caller sent: ours passes, a malformed
   * one is INVALID_ARGUMENT, a newer one NOT_LEADER, and another (older)
   * one gets `stale`: STALE_FENCING_TOKEN for a TaskExecutor (service
   * comment), NOT_REGISTERED for a JobMaster ("Fencing in both directions").
   */
  private async checkRmToken(t: FencingToken | undefined, stale: (cur: FencingToken) => Error): Promise<void> {
    const cur = this.leading();
    if (!cur) throw await this.notLeaderError();
    switch (judge(t, cur)) {
      case "current":
        return;
      case "malformed":
        throw malformedError("resource_manager_token");
      case "stale":
        throw stale(cur);
      case "newer":
        throw await this.notLeaderError();
    }
  }

  /** A TaskExecutor's ResourceManager token: another one is STALE_FENCING_TOKEN. */
  private checkTeToken(t: FencingToken | undefined): Promise<void> {
    return this.checkRmToken(t, (cur) => staleError(ELECTION, cur));
  }

  /**
   * The ResourceManager token a JobMaster's call carries: another one than
   * ours is NOT_REGISTERED. Checked before the JobMaster's token ("Order of
   * the checks").
   */
  private checkJmCallRmToken(t: FencingToken | undefined): Promise<void> {
    return this.checkRmToken(t, () => notRegistered("the call carries another ResourceManager token than the current one: register again"));
  }

  // ---- TaskExecutors ------------------------------------------------------

  async registerTaskExecutor(req: ResourceManagerServiceRegisterTaskExecutorRequest) {
    const v = [];
    if (!req.taskExecutorId) v.push({ field: "task_executor_id", description: "required" });
    if (!req.address) v.push({ field: "address", description: "required" });
    if (!req.resourceManagerToken) v.push({ field: "resource_manager_token", description: "required" });
    if (v.length > 0) throw invalidArgument(v);
    await this.checkTeToken(req.resourceManagerToken);
    // A member before it is answered, so before anything is deployed there.
    await this.addMember(this.token!, req.taskExecutorId);
    await this.checkTeToken(req.resourceManagerToken);
    const te: RegisteredTE = {
      id: req.taskExecutorId,
      address: req.address,
      registrationId: randomUUID(),
      invokables: [...req.invokables].sort(),
      slots: [],
      lastHeard: performance.now(),
      reportVersion: 0n,
      toldJobMasters: new Map(),
    };
    this.applyReport(te, req.slotReport, 0n);
    this.tes.set(te.id, te); // replaces an earlier registration of the id
    this.log(`TaskExecutor ${te.id} registered at ${te.address}: ${te.slots.length} slots, invokables ${te.invokables.join(",")}`);
    this.kick();
    return {
      registrationId: te.registrationId,
      heartbeatInterval: durationFromMs(heartbeatIntervalMs(this.ttl)),
      heartbeatTimeout: durationFromMs(heartbeatTimeoutMs(this.ttl)),
    };
  }

  async heartbeat(req: ResourceManagerServiceHeartbeatRequest) {
    await this.checkTeToken(req.resourceManagerToken);
    const te = this.tes.get(req.taskExecutorId);
    if (!te || te.registrationId !== req.registrationId) {
      throw notRegistered(`TaskExecutor ${req.taskExecutorId} is not registered under this registration`, {
        task_executor_id: req.taskExecutorId,
      });
    }
    te.lastHeard = performance.now();
    if (req.slotReport) {
      this.applyReport(te, req.slotReport, req.slotReportVersion);
      this.kick();
    }
    // The JobMasters of the jobs holding slots here, as they changed since the last answer.
    const jobMasters: LeaderInfo[] = [];
    for (const jobId of new Set(te.slots.filter((s) => s.jobId).map((s) => s.jobId))) {
      const reg = this.jobs.get(jobId);
      if (!reg) continue;
      const key = `${reg.token.sessionId}@${reg.token.epoch}`;
      if (te.toldJobMasters.get(jobId) === key) continue;
      te.toldJobMasters.set(jobId, key);
      jobMasters.push(create(LeaderInfoSchema, { election: `job/${jobId}`, address: reg.address, token: reg.token }));
    }
    return { slotReportVersion: te.reportVersion, jobMasters };
  }

  /** Takes a slot report, except where our own allocation is newer than the report. */
  private applyReport(te: RegisteredTE, report: SlotReport | undefined, version: bigint): void {
    if (!report) return;
    const now = performance.now();
    const old = new Map(te.slots.map((s) => [s.index, s]));
    te.slots = report.slots.map((r) => {
      const mine = old.get(r.slotIndex);
      if (mine?.requested && mine.allocationId !== r.allocationId) {
        const caughtUp = version !== 0n && mine.requested.version !== 0n ? version >= mine.requested.version : now - mine.requested.at > UNVERSIONED_GRACE_MS;
        if (!caughtUp) return mine;
      }
      return {
        index: r.slotIndex,
        profile: r.profile,
        allocationId: r.allocationId,
        jobId: r.jobId,
        requested: undefined,
        blockedUntil: mine?.blockedUntil ?? 0,
      };
    });
    if (version > te.reportVersion || version === 0n) te.reportVersion = version;
  }

  // ---- JobMasters -----------------------------------------------------------

  /**
   * RegisterJobMaster: a token other than the job's registered one is
   * registered only if the store shows it as the current grant of
   * `job/<id>` (read now); anything else is STALE_FENCING_TOKEN.
   */
  async registerJobMaster(req: RegisterJobMasterRequest) {
    const v = [];
    if (!req.jobId) v.push({ field: "job_id", description: "required" });
    if (!req.jobMasterAddress) v.push({ field: "job_master_address", description: "required" });
    if (!req.jobMasterToken) v.push({ field: "job_master_token", description: "required" });
    if (v.length > 0) throw invalidArgument(v);
    const cur = this.leading();
    if (!cur) throw await this.notLeaderError();
    const t = req.jobMasterToken!;
    if (judge(t, t) === "malformed") throw malformedError("job_master_token");
    const election = `job/${req.jobId}`;
    const reg = this.jobs.get(req.jobId);
    if (reg && sameToken(reg.token, t)) {
      reg.address = req.jobMasterAddress;
      return { resourceManagerToken: cur };
    }
    const newest = this.newestJobToken.get(req.jobId);
    if (newest && t.epoch < newest.epoch) throw staleError(election, newest);
    let grant: FencingToken | undefined;
    try {
      grant = (await this.store.getLeader({ election }, { timeoutMs: 3000 })).leader?.token;
    } catch (e) {
      throw jpError(Code.Unavailable, "STORE_UNAVAILABLE", `the HA store could not be read: ${String(e)}`, { election });
    }
    if (!sameToken(grant, t)) throw staleError(election, grant);
    if (this.leading() !== cur) throw await this.notLeaderError();
    // A newer grant replaces the registration; its slots stay the job's.
    this.newestJobToken.set(req.jobId, t);
    this.jobs.set(req.jobId, {
      jobId: req.jobId,
      token: t,
      address: req.jobMasterAddress,
      required: reg?.required ?? 0,
      invokables: reg?.invokables ?? [],
      order: reg?.order ?? this.order++,
    });
    this.log(`JobMaster of ${req.jobId} registered, epoch ${t.epoch}`);
    return { resourceManagerToken: cur };
  }

  /** The registration a JobMaster's call names, after both tokens were judged. */
  private jobCallRegistration(jobId: string, t: FencingToken | undefined, mayBeUnknown: boolean): JobRegistration | undefined {
    if (judge(t, t) === "malformed") throw malformedError("job_master_token");
    const reg = this.jobs.get(jobId);
    const election = `job/${jobId}`;
    if (!reg) {
      if (mayBeUnknown) return undefined;
      throw notRegistered(`no JobMaster of ${jobId} is registered`, { job_id: jobId });
    }
    switch (judge(t, reg.token)) {
      case "current":
        return reg;
      case "stale":
        throw staleError(election, reg.token);
      case "newer":
        // A token newer than the registered one names no registration
        // (contract 1.2, stated): DeclareResourceRequirements answers
        // NOT_REGISTERED (register first), DisconnectJobMaster succeeds
        // with nothing done. Nothing is read from the store for it.
        if (mayBeUnknown) return undefined;
        throw notRegistered(`JobMaster token epoch ${t!.epoch} of ${jobId} is newer than the registered one (epoch ${reg.token.epoch}): register first`, { job_id: jobId });
      default:
        throw malformedError("job_master_token");
    }
  }

  async declareResourceRequirements(req: DeclareResourceRequirementsRequest) {
    await this.checkJmCallRmToken(req.resourceManagerToken);
    const v = [];
    if (!req.jobId) v.push({ field: "job_id", description: "required" });
    req.requirements.forEach((r, i) => {
      if (r.slots < 0) v.push({ field: `requirements[${i}].slots`, description: "must not be negative" });
    });
    if (v.length > 0) throw invalidArgument(v);
    const reg = this.jobCallRegistration(req.jobId, req.jobMasterToken, false)!;
    reg.required = req.requirements.reduce((n, r) => n + r.slots, 0);
    reg.invokables = [...new Set(req.requirements.flatMap((r) => r.invokables))];
    this.kick();
    return {};
  }

  async disconnectJobMaster(req: DisconnectJobMasterRequest) {
    await this.checkJmCallRmToken(req.resourceManagerToken);
    const reg = this.jobCallRegistration(req.jobId, req.jobMasterToken, true);
    if (!reg) return {};
    this.jobs.delete(req.jobId);
    this.freed(req.jobId, req.freedAllocationIds);
    this.log(`JobMaster of ${req.jobId} disconnected: ${req.reason}`);
    return {};
  }

  /** Allocations of the job that its JobMaster freed at their TaskExecutors: free at once. */
  freed(jobId: string, allocationIds: string[]): void {
    const ids = new Set(allocationIds);
    for (const te of this.tes.values()) {
      for (const s of te.slots) {
        if (s.jobId === jobId && ids.has(s.allocationId)) {
          s.allocationId = "";
          s.jobId = "";
          s.requested = undefined;
        }
      }
    }
    this.kick();
  }

  /** What this process's own JobMasters call: the same checks as over the wire. */
  readonly local = {
    register: (r: MessageInitShape<typeof RegisterJobMasterRequestSchema>) =>
      this.registerJobMaster(create(RegisterJobMasterRequestSchema, r)),
    declare: (r: MessageInitShape<typeof DeclareResourceRequirementsRequestSchema>) =>
      this.declareResourceRequirements(create(DeclareResourceRequirementsRequestSchema, r)),
    disconnect: (r: MessageInitShape<typeof DisconnectJobMasterRequestSchema>) =>
      this.disconnectJobMaster(create(DisconnectJobMasterRequestSchema, r)),
  };

  // ---- allocation -----------------------------------------------------------

  private kick(): void {
    if (this.reconciling) {
      this.again = true;
      return;
    }
    this.reconciling = true;
    void this.reconcile().finally(() => {
      this.reconciling = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  private tick(): void {
    if (!this.token) return;
    const timeout = heartbeatTimeoutMs(this.ttl);
    const now = performance.now();
    for (const te of [...this.tes.values()]) {
      // Silence is judged on the monotonic clock; a stall of this process
      // (see Leadership) ends the grant anyway.
      if (now - te.lastHeard > timeout) {
        this.tes.delete(te.id);
        this.membership.gone.set(te.id, te.lastHeard);
        this.log(`TaskExecutor ${te.id} lost: no heartbeat for ${Math.round(now - te.lastHeard)} ms`);
      }
    }
    const cur = this.leading();
    if (cur) this.removeGone(cur, now);
    this.kick();
  }

  /** Requests slots for every job whose declaration is not met. */
  private async reconcile(): Promise<void> {
    const cur = this.leading();
    if (!cur) return;
    const now = performance.now();
    const calls: Promise<void>[] = [];
    for (const reg of [...this.jobs.values()].sort((a, b) => a.order - b.order)) {
      let have = 0;
      for (const te of this.tes.values()) for (const s of te.slots) if (s.jobId === reg.jobId) have++;
      let need = reg.required - have;
      if (need <= 0) continue;
      // Only TaskExecutors offering all the job's invokables, while some do.
      const all = [...this.tes.values()];
      const fit = all.filter((te) => reg.invokables.every((i) => te.invokables.includes(i)));
      const eligible = fit.length > 0 ? fit : all;
      for (const te of eligible) {
        for (const s of te.slots) {
          if (need <= 0) break;
          if (s.allocationId || s.blockedUntil > now) continue;
          s.allocationId = randomUUID();
          s.jobId = reg.jobId;
          s.requested = { version: 0n, at: now };
          need--;
          calls.push(this.requestSlot(cur, te, s, reg));
        }
      }
    }
    await Promise.all(calls);
  }

  private async requestSlot(cur: FencingToken, te: RegisteredTE, s: Slot, reg: JobRegistration): Promise<void> {
    const allocationId = s.allocationId;
    try {
      if (this.leading() !== cur) return;
      const r = await teClient(te.address).requestSlot(
        {
          resourceManagerToken: cur,
          slotIndex: s.index,
          allocationId,
          jobId: reg.jobId,
          jobMasterAddress: reg.address,
          profile: s.profile,
          jobMasterToken: reg.token,
        },
        { timeoutMs: TE_CALL_MS },
      );
      if (s.allocationId === allocationId && s.requested) s.requested = { version: r.slotReportVersion, at: s.requested.at };
    } catch (e) {
      const { reason } = reasonOf(e);
      this.log(`RequestSlot ${te.id}[${s.index}] for ${reg.jobId} refused: ${reason || String(e)}`);
      if (s.allocationId === allocationId) {
        // The TaskExecutor's next report says what the slot holds.
        s.allocationId = reason === "SLOT_OCCUPIED" ? "?" : "";
        s.jobId = "";
        s.requested = reason === "SLOT_OCCUPIED" ? { version: 0n, at: performance.now() - UNVERSIONED_GRACE_MS } : undefined;
        s.blockedUntil = performance.now() + 1000;
      }
    }
  }

  // ---- what the Dispatcher shows -------------------------------------------

  overview(): { taskExecutors: number; slots: number; free: number } {
    let slots = 0, free = 0;
    for (const te of this.tes.values()) {
      slots += te.slots.length;
      free += te.slots.filter((s) => !s.allocationId).length;
    }
    return { taskExecutors: this.tes.size, slots, free };
  }

  /** Registered TaskExecutors in id order, for ListTaskExecutors. */
  taskExecutors(): { id: string; address: string; invokables: string[]; slots: { index: number; jobId: string }[]; silenceMs: number }[] {
    const now = performance.now();
    return [...this.tes.values()]
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .map((te) => ({
        id: te.id,
        address: te.address,
        invokables: te.invokables,
        slots: te.slots.map((s) => ({ index: s.index, jobId: s.jobId })),
        silenceMs: now - te.lastHeard,
      }));
  }

  /** Invokables some registered TaskExecutor offers. */
  offeredInvokables(): Set<string> {
    return new Set([...this.tes.values()].flatMap((te) => te.invokables));
  }

  service(guard: Guard): ServiceImpl<typeof ResourceManagerService> {
    return guardAll(guard, "RM.", {
      registerTaskExecutor: (r: ResourceManagerServiceRegisterTaskExecutorRequest) => this.registerTaskExecutor(r),
      heartbeat: (r: ResourceManagerServiceHeartbeatRequest) => this.heartbeat(r),
      registerJobMaster: (r: RegisterJobMasterRequest) => this.registerJobMaster(r),
      declareResourceRequirements: (r: DeclareResourceRequirementsRequest) => this.declareResourceRequirements(r),
      disconnectJobMaster: (r: DisconnectJobMasterRequest) => this.disconnectJobMaster(r),
    });
  }

}
