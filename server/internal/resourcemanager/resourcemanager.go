package resourcemanager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/batch"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/liveness"
)

// Config configures a ResourceManager.
type Config struct {
	// HTTPClient carries calls to TaskExecutors and JobMasters. Required.
	HTTPClient connect.HTTPClient
	// HeartbeatInterval is how often TaskExecutors heart-beat. Default: 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a TaskExecutor may stay silent before
	// it is dropped with its slots. Default: 10s.
	HeartbeatTimeout time.Duration
	// Logger receives the ResourceManager's logs. Default: slog.Default().
	Logger *slog.Logger
	// Members, if set, keeps the TaskExecutor membership (see
	// hastore.Members): the ResourceManager records each TaskExecutor
	// before it answers its registration, and removes it once it has
	// been gone for longer than the task lease (or the heartbeat timeout).
	Members hastore.Members
	// TaskLease is the task lease the JobMasters grant (see
	// jobmaster.Config.TaskLease); zero if they grant none.
	TaskLease time.Duration
	// Elections reads the current grant of a job's election, which
	// RegisterJobMaster checks a new JobMaster token against (see
	// Elections). Required.
	Elections Elections
	// OnHeld, if set, is called, outside the ResourceManager's lock, with
	// the jobs of allocations a TaskExecutor's registration or slot report
	// showed that the ResourceManager did not know of: after a change of
	// leader, tasks of theirs may run and wait for a JobMaster to adopt
	// them, and the Dispatcher launches them at once.
	OnHeld func(jobIDs []string)
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	if c.HTTPClient == nil {
		return errors.New("resourcemanager: HTTP client is required")
	}
	if c.Elections == nil {
		return errors.New("resourcemanager: elections are required")
	}
	if c.HeartbeatInterval < 0 || c.HeartbeatTimeout < 0 {
		return errors.New("resourcemanager: durations must not be negative")
	}
	return nil
}

// ResourceManager matches declared slot requirements with TaskExecutor
// slots. Serve its Handler; it answers while Lead runs.
type ResourceManager struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	lead *hastore.Leadership // nil while not leading
	// leadSince is when the current leadership began.
	leadSince time.Time
	token     election.Token  // zero while not leading
	judge     *liveness.Judge // TaskExecutors' silence, less the ResourceManager's own stalls
	pool      *pool           // nil while not leading
	// members is the TaskExecutor membership as this leadership knows
	// it; nil while not leading or without Config.Members.
	members *members
	kick    chan struct{}
}

// New returns a ResourceManager for cfg.
func New(cfg Config) (*ResourceManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ResourceManager{
		cfg:  cfg,
		log:  cfg.Logger.With("component", "resourcemanager"),
		kick: make(chan struct{}, 1),
	}, nil
}

// Handler returns the URL path and HTTP handler of ResourceManagerService.
func (rm *ResourceManager) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return clusterv1connect.NewResourceManagerServiceHandler(&handler{rm: rm}, opts...)
}

// Local returns a client of this ResourceManager for the JobMasters of its
// own process: each call is its handler's, made directly, with no
// encoding and no loopback round trip (the way Flink's local RPC gateways
// skip the network). Answers and errors are those a remote call gets.
func (rm *ResourceManager) Local() clusterv1connect.ResourceManagerServiceClient {
	return &handler{rm: rm}
}

// Lead serves as the ResourceManager under leadership l until ctx ends
// (the leadership is lost), then forgets everything. It answers, allocates
// and expires TaskExecutors only while l is valid.
func (rm *ResourceManager) Lead(ctx context.Context, l *hastore.Leadership) error {
	token := l.Token()
	tick := max(rm.cfg.HeartbeatInterval/2, 10*time.Millisecond)
	rm.mu.Lock()
	rm.lead, rm.token, rm.leadSince = l, token, time.Now()
	rm.judge = liveness.New(tick)
	rm.pool = newPool()
	if rm.cfg.Members != nil {
		rm.members = newMembers()
	}
	m := rm.members
	rm.mu.Unlock()
	rm.log.Info("leading", "token", token)
	defer func() {
		rm.mu.Lock()
		rm.lead, rm.token, rm.judge, rm.pool, rm.members = nil, election.Token{}, nil, nil, nil
		rm.mu.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	if m != nil {
		wg.Go(func() { rm.loadMembers(ctx, m) })
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			rm.expire(ctx, &wg)
		case <-rm.kick:
		}
		rm.allocate(ctx, &wg)
	}
}

func (rm *ResourceManager) poke() {
	select {
	case rm.kick <- struct{}{}:
	default:
	}
}

// leadingLocked reports whether the ResourceManager leads and its
// leadership certainly holds; rm.mu must be held.
func (rm *ResourceManager) leadingLocked() bool {
	return rm.lead != nil && rm.lead.Valid()
}

// expire drops TaskExecutors silent past the heartbeat timeout, and tells
// the JobMasters that held slots on them. It is the judge's tick: silence
// while the ResourceManager itself stood still does not count.
func (rm *ResourceManager) expire(ctx context.Context, wg *sync.WaitGroup) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.judge == nil {
		return
	}
	now := time.Now()
	rm.judge.Tick(now)
	if !rm.leadingLocked() {
		return
	}
	for id, e := range rm.pool.executors {
		silence := rm.judge.Silence(e.heard, now)
		if silence < rm.cfg.HeartbeatTimeout {
			continue
		}
		rm.log.Warn("TaskExecutor timed out; releasing its slots", "task_executor", id, "silent_for", silence.Round(time.Millisecond))
		for jobID := range rm.pool.removeExecutor(id) {
			if j := rm.pool.jobs[jobID]; j != nil {
				wg.Add(1)
				go func(j jobNeeds) {
					defer wg.Done()
					rm.tellLost(ctx, jobID, j, id)
				}(*j)
			}
		}
		rm.poke()
	}
	rm.expireMembersLocked(ctx, now, rm.token)
}

func (rm *ResourceManager) tellLost(ctx context.Context, jobID string, j jobNeeds, executorID string) {
	jm := clusterv1connect.NewJobMasterServiceClient(rm.cfg.HTTPClient, j.address, endpoint.ClientOptions()...)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := jm.DisconnectTaskExecutor(rctx, &clusterv1.DisconnectTaskExecutorRequest{
		JobId: jobID, JobMasterToken: protoToken(j.token), TaskExecutorId: executorID, Reason: "heartbeat timeout at the ResourceManager",
	})
	if err != nil {
		rm.log.Debug("telling a JobMaster of a lost TaskExecutor", "job", jobID, "err", err)
	}
}

// allocate requests free slots for the jobs waiting for them (see pool):
// what changed since the last call, not a pass over every job. The slots
// allocated on one TaskExecutor go to it in one call (RequestSlots), or
// one RequestSlot each to a TaskExecutor without it.
func (rm *ResourceManager) allocate(ctx context.Context, wg *sync.WaitGroup) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if !rm.leadingLocked() {
		return
	}
	type request struct {
		e      *executor
		allocs []*allocation
		slots  []*clusterv1.SlotRequest
	}
	var requests []*request
	byExecutor := map[string]*request{}
	rm.pool.allocate(time.Now(), func(a *allocation, e *executor, j *jobNeeds) {
		r := byExecutor[e.id]
		if r == nil {
			r = &request{e: e}
			byExecutor[e.id] = r
			requests = append(requests, r)
		}
		r.allocs = append(r.allocs, a)
		r.slots = append(r.slots, &clusterv1.SlotRequest{
			SlotIndex: int32(a.slot), AllocationId: a.id, JobId: a.jobID, JobMasterAddress: j.address, JobMasterToken: protoToken(j.token),
		})
	})
	token, p := protoToken(rm.token), rm.pool
	for _, r := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			errs, versions := requestSlots(rctx, r.e, token, r.slots)
			rm.mu.Lock()
			defer rm.mu.Unlock()
			if rm.pool != p {
				return
			}
			failed := false
			for i, a := range r.allocs {
				if errs[i] != nil {
					rm.log.Debug("RequestSlot failed", "allocation", a.id, "err", errs[i])
					p.removeAllocation(a.id)
					failed = true
					continue
				}
				p.allocated(a.id, versions[i])
			}
			if failed {
				if e := p.executors[r.e.id]; e != nil {
					e.backoffUntil = time.Now().Add(rm.cfg.HeartbeatInterval)
				}
				rm.poke()
			}
		}()
	}
}

// requestSlots requests slots on one TaskExecutor, in one call per
// bounded run (RequestSlots), or one RequestSlot each if it lacks that
// (batch.Send). It returns the outcome of each slot and the slot report
// version that holds it.
func requestSlots(ctx context.Context, e *executor, token *jobplanev1.FencingToken, slots []*clusterv1.SlotRequest) ([]error, []uint64) {
	type outcome struct {
		err     error
		version uint64
	}
	out := batch.Send(&e.single, slots, batch.Split,
		func(run []*clusterv1.SlotRequest) ([]outcome, error) {
			resp, err := e.client.RequestSlots(ctx, &clusterv1.RequestSlotsRequest{ResourceManagerToken: token, Slots: run})
			o := make([]outcome, len(run))
			for i, err := range apierror.ItemErrors(len(run), err, resp.GetRefused()) {
				o[i] = outcome{err, resp.GetSlotReportVersion()}
			}
			return o, err
		},
		func(s *clusterv1.SlotRequest) outcome {
			resp, err := e.client.RequestSlot(ctx, &clusterv1.RequestSlotRequest{
				ResourceManagerToken: token, SlotIndex: s.GetSlotIndex(), AllocationId: s.GetAllocationId(), JobId: s.GetJobId(),
				JobMasterAddress: s.GetJobMasterAddress(), Profile: s.GetProfile(), JobMasterToken: s.GetJobMasterToken(),
			})
			return outcome{err, resp.GetSlotReportVersion()}
		})
	errs, versions := make([]error, len(out)), make([]uint64, len(out))
	for i, o := range out {
		errs[i], versions[i] = o.err, o.version
	}
	return errs, versions
}

// grace is how long a requested allocation may be missing from slot
// reports before it counts as failed.
func (rm *ResourceManager) grace() time.Duration { return 2*rm.cfg.HeartbeatInterval + time.Second }

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func protoToken(t election.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

func tokenOf(t *jobplanev1.FencingToken) election.Token {
	return election.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}

// Overview summarizes the registered TaskExecutors and their slots.
type Overview struct {
	TaskExecutors, SlotsTotal, SlotsAvailable int
	// JobsWaiting counts the jobs that declared more slots than they
	// hold: queued for slots.
	JobsWaiting int
	// Executors are each TaskExecutor's slots, by id.
	Executors map[string]ExecutorSlots
}

// ExecutorSlots are one TaskExecutor's slots: all, and those allocated.
type ExecutorSlots struct{ Total, Used int }

// Overview returns the current summary; zero while not leading.
func (rm *ResourceManager) Overview() Overview {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.pool == nil {
		return Overview{}
	}
	o := Overview{TaskExecutors: len(rm.pool.executors), SlotsTotal: rm.pool.total, SlotsAvailable: rm.pool.free(), JobsWaiting: len(rm.pool.queued),
		Executors: make(map[string]ExecutorSlots, len(rm.pool.executors))}
	for id, e := range rm.pool.executors {
		o.Executors[id] = ExecutorSlots{Total: e.slots, Used: len(e.used)}
	}
	return o
}

// TaskExecutors returns up to n registered TaskExecutors in id order,
// after the id `after`, and whether more follow.
func (rm *ResourceManager) TaskExecutors(after string, n int) ([]*jobplanev1.TaskExecutorInfo, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.pool == nil || rm.judge == nil {
		return nil, false
	}
	ids := make([]string, 0, len(rm.pool.executors))
	for id := range rm.pool.executors {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	more := len(ids) > n
	ids = ids[:min(n, len(ids))]
	now := time.Now()
	out := make([]*jobplanev1.TaskExecutorInfo, 0, len(ids))
	for _, id := range ids {
		e := rm.pool.executors[id]
		info := &jobplanev1.TaskExecutorInfo{
			TaskExecutorId: id, Address: e.address, Invokables: slices.Sorted(slices.Values(e.invokables)),
			SlotCount: int32(e.slots), FreeSlotCount: int32(e.slots - len(e.used)),
			Silence: durationpb.New(rm.judge.Silence(e.heard, now)),
		}
		for _, index := range slices.Sorted(maps.Keys(e.used)) {
			info.AllocatedSlots = append(info.AllocatedSlots, &jobplanev1.AllocatedSlot{SlotIndex: int32(index), JobId: e.used[index].jobID})
		}
		out = append(out, info)
	}
	return out, more
}
