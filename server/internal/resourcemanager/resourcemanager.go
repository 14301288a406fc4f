package resourcemanager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/hastore"
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
}

// Validate reports whether the configuration can be used.
func (c Config) Validate() error {
	if c.HTTPClient == nil {
		return errors.New("resourcemanager: HTTP client is required")
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

	mu          sync.Mutex
	lead        *hastore.Leadership // nil while not leading
	token       hastore.Token       // zero while not leading
	judge       *liveness.Judge     // TaskExecutors' silence, less the ResourceManager's own stalls
	executors   map[string]*executor
	jobs        map[string]*jobNeeds
	allocations map[string]*allocation
	// freed are allocations that JobMasters freed (allocation id ->
	// TaskExecutor id), until a slot report no longer shows them: a report
	// sent before the FreeSlot must not allocate them again.
	freed map[string]string
	kick  chan struct{}
}

type executor struct {
	id, address    string
	registrationID string
	heard          liveness.Mark // the last heartbeat (or registration)
	slots          int
	invokables     []string
	client         jobplanev1connect.TaskExecutorServiceClient
	backoffUntil   time.Time // no slot requests before, after a failed one
}

type jobNeeds struct {
	token      hastore.Token
	address    string
	required   int
	invokables []string
}

type allocation struct {
	id          string
	executor    string
	slot        int
	jobID       string
	requestedAt time.Time // zero once a slot report showed it
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
	return jobplanev1connect.NewResourceManagerServiceHandler(&handler{rm: rm}, opts...)
}

// Lead serves as the ResourceManager under leadership l until ctx ends
// (the leadership is lost), then forgets everything. It answers, allocates
// and expires TaskExecutors only while l is valid.
func (rm *ResourceManager) Lead(ctx context.Context, l *hastore.Leadership) error {
	token := l.Token()
	tick := max(rm.cfg.HeartbeatInterval/2, 10*time.Millisecond)
	rm.mu.Lock()
	rm.lead, rm.token = l, token
	rm.judge = liveness.New(tick)
	rm.executors = make(map[string]*executor)
	rm.jobs = make(map[string]*jobNeeds)
	rm.allocations = make(map[string]*allocation)
	rm.freed = make(map[string]string)
	rm.mu.Unlock()
	rm.log.Info("leading", "token", token)
	defer func() {
		rm.mu.Lock()
		rm.lead, rm.token, rm.judge = nil, hastore.Token{}, nil
		rm.executors, rm.jobs, rm.allocations, rm.freed = nil, nil, nil, nil
		rm.mu.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
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
	for id, e := range rm.executors {
		silence := rm.judge.Silence(e.heard, now)
		if silence < rm.cfg.HeartbeatTimeout {
			continue
		}
		rm.log.Warn("TaskExecutor timed out; releasing its slots", "task_executor", id, "silent_for", silence.Round(time.Millisecond))
		delete(rm.executors, id)
		affected := map[string]bool{}
		for aid, a := range rm.allocations {
			if a.executor == id {
				affected[a.jobID] = true
				delete(rm.allocations, aid)
			}
		}
		for jobID := range affected {
			if j := rm.jobs[jobID]; j != nil {
				wg.Add(1)
				go func(j jobNeeds) {
					defer wg.Done()
					rm.tellLost(ctx, jobID, j, id)
				}(*j)
			}
		}
		rm.poke()
	}
}

func (rm *ResourceManager) tellLost(ctx context.Context, jobID string, j jobNeeds, executorID string) {
	jm := jobplanev1connect.NewJobMasterServiceClient(rm.cfg.HTTPClient, j.address)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := jm.DisconnectTaskExecutor(rctx, &jobplanev1.DisconnectTaskExecutorRequest{
		JobId: jobID, JobMasterToken: protoToken(j.token), TaskExecutorId: executorID, Reason: "heartbeat timeout at the ResourceManager",
	})
	if err != nil {
		rm.log.Debug("telling a JobMaster of a lost TaskExecutor", "job", jobID, "err", err)
	}
}

// allocate requests slots for every job whose allocations fall short of
// its requirement.
func (rm *ResourceManager) allocate(ctx context.Context, wg *sync.WaitGroup) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if !rm.leadingLocked() {
		return
	}
	held := map[string]int{}
	used := map[string]map[int]bool{}
	for _, a := range rm.allocations {
		held[a.jobID]++
		if used[a.executor] == nil {
			used[a.executor] = map[int]bool{}
		}
		used[a.executor][a.slot] = true
	}
	ids := make([]string, 0, len(rm.executors))
	for id := range rm.executors {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for jobID, j := range rm.jobs {
		for need := j.required - held[jobID]; need > 0; need-- {
			e, slot := rm.freeSlotLocked(ids, used, j.invokables)
			if e == nil {
				break
			}
			if used[e.id] == nil {
				used[e.id] = map[int]bool{}
			}
			used[e.id][slot] = true
			a := &allocation{id: newID(), executor: e.id, slot: slot, jobID: jobID, requestedAt: time.Now()}
			rm.allocations[a.id] = a
			req := &jobplanev1.RequestSlotRequest{
				ResourceManagerToken: protoToken(rm.token), SlotIndex: int32(slot), AllocationId: a.id,
				JobId: jobID, JobMasterAddress: j.address, JobMasterToken: protoToken(j.token),
			}
			wg.Add(1)
			go func(client jobplanev1connect.TaskExecutorServiceClient) {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := client.RequestSlot(rctx, req); err != nil {
					rm.log.Debug("RequestSlot failed", "allocation", a.id, "err", err)
					rm.mu.Lock()
					if rm.allocations != nil {
						delete(rm.allocations, a.id)
					}
					if e := rm.executors[a.executor]; e != nil {
						e.backoffUntil = time.Now().Add(rm.cfg.HeartbeatInterval)
					}
					rm.mu.Unlock()
				}
			}(e.client)
		}
	}
}

// freeSlotLocked finds a free slot on a TaskExecutor that offers every
// invokable in need. If no registered TaskExecutor offers them all, any
// slot will do: the deployment then fails with a clear cause instead of
// the job waiting for ever.
func (rm *ResourceManager) freeSlotLocked(ids []string, used map[string]map[int]bool, need []string) (*executor, int) {
	someOffer := false
	for _, e := range rm.executors {
		someOffer = someOffer || offersAll(e.invokables, need)
	}
	if !someOffer {
		need = nil
	}
	now := time.Now()
	for _, id := range ids {
		e := rm.executors[id]
		if !offersAll(e.invokables, need) || now.Before(e.backoffUntil) {
			continue
		}
		for s := range e.slots {
			if !used[id][s] {
				return e, s
			}
		}
	}
	return nil, 0
}

func offersAll(have, need []string) bool {
	for _, n := range need {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// applyReportLocked reconciles allocations with a TaskExecutor's slot
// report: allocations it shows are confirmed (or learnt, after a
// failover), and confirmed ones it shows free were released.
func (rm *ResourceManager) applyReportLocked(e *executor, report *jobplanev1.SlotReport) {
	e.slots = len(report.GetSlots())
	bySlot := map[int]*allocation{}
	for _, a := range rm.allocations {
		if a.executor == e.id {
			bySlot[a.slot] = a
		}
	}
	grace := 2*rm.cfg.HeartbeatInterval + time.Second
	shown := map[string]bool{}
	for _, s := range report.GetSlots() {
		idx := int(s.GetSlotIndex())
		a := bySlot[idx]
		shown[s.GetAllocationId()] = true
		switch {
		case rm.freed[s.GetAllocationId()] == e.id:
			// A report older than the FreeSlot its JobMaster made.
		case s.GetAllocationId() != "" && a != nil && a.id == s.GetAllocationId():
			a.requestedAt = time.Time{}
		case s.GetAllocationId() != "":
			if a != nil {
				delete(rm.allocations, a.id)
			}
			rm.allocations[s.GetAllocationId()] = &allocation{id: s.GetAllocationId(), executor: e.id, slot: idx, jobID: s.GetJobId()}
		case a != nil && (a.requestedAt.IsZero() || time.Since(a.requestedAt) > grace):
			delete(rm.allocations, a.id)
			rm.poke()
		}
	}
	for aid, executor := range rm.freed {
		if executor == e.id && !shown[aid] {
			delete(rm.freed, aid)
		}
	}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func protoToken(t hastore.Token) *jobplanev1.FencingToken {
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

func tokenOf(t *jobplanev1.FencingToken) hastore.Token {
	return hastore.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}

// Overview summarizes the registered TaskExecutors and their slots.
type Overview struct {
	TaskExecutors, SlotsTotal, SlotsAvailable int
}

// Overview returns the current summary; zero while not leading.
func (rm *ResourceManager) Overview() Overview {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	var o Overview
	for _, e := range rm.executors {
		o.TaskExecutors++
		o.SlotsTotal += e.slots
	}
	o.SlotsAvailable = o.SlotsTotal - len(rm.allocations)
	return o
}
