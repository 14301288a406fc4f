package jobmaster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/liveness"
)

// Router serves JobMasterService for every JobMaster of a process,
// routing each call by its job id to the JobMaster that currently runs the
// job here. It is also the process's side of TaskExecutor liveness: one
// heartbeat per TaskExecutor, not per job (HeartbeatFromTaskExecutor),
// one judge, one ticker (Run), and one timer for every JobMaster's
// deadlines.
type Router struct {
	clusterv1connect.UnimplementedJobMasterServiceHandler

	cfg RouterConfig

	mu        sync.Mutex
	masters   map[string]*JobMaster
	executors map[string]*executorLink       // by TaskExecutor id
	followers map[string]map[string]struct{} // job id -> ids of TaskExecutors that follow it here
	judge     *liveness.Judge
	// adopters are the JobMasters still looking for attempts to adopt,
	// and sweepQueued says a sweep of the membership for them is due.
	adopters    map[*JobMaster]struct{}
	sweepQueued bool

	deadlines deadlines
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// HeartbeatInterval is how often TaskExecutors heart-beat and the
	// Router judges their silence. Default: 1s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a TaskExecutor may stay silent before
	// it is lost for every job here. Default: 10s.
	HeartbeatTimeout time.Duration
	// LeaderAddress, if set, tells where a job's JobMaster runs, for
	// NOT_LEADER answers about jobs not run here.
	LeaderAddress func(ctx context.Context, jobID string) string
	// LeaseUntil, if set, tells until when the JobMasters here certainly
	// lead (the process's session validity), for the lease heartbeats
	// grant TaskExecutors.
	LeaseUntil func() time.Time
	// TaskLease, if set, is the task lease heartbeat answers grant while
	// LeaseUntil is still to come (see jobmaster.Config.TaskLease).
	TaskLease time.Duration
	// HTTPClient carries the JobMasters' calls to TaskExecutors. Default:
	// transport.NewClient(nil).
	HTTPClient connect.HTTPClient
	// Members, if set, returns the TaskExecutor membership (see
	// hastore.Members) with the address each member registered with
	// ("" if unknown), and false while it is not known. An adopting
	// JobMaster then asks every member what it holds of its job, and
	// ends its adoption once all have answered, rather than when the
	// task lease has passed.
	Members func() (map[string]string, bool)
}

// executorLink is what the process knows of one TaskExecutor: when it was
// last heard, the jobs it follows here, and what it is owed at its next
// heartbeat.
type executorLink struct {
	address string
	heard   liveness.Mark
	jobs    map[string]election.Token // followed here, with the token followed
	owed    map[string]*clusterv1.TaskExecutorJobAnswer
	// client is the process's client of the TaskExecutor at address, made
	// when a JobMaster here first registers it; nil before.
	client *executorClient
}

// NewRouter returns an empty Router for cfg.
func NewRouter(cfg RouterConfig) *Router {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = 10 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = transport.NewClient(nil)
	}
	return &Router{
		cfg:       cfg,
		masters:   make(map[string]*JobMaster),
		executors: make(map[string]*executorLink),
		followers: make(map[string]map[string]struct{}),
		judge:     liveness.New(cfg.HeartbeatInterval),
		adopters:  make(map[*JobMaster]struct{}),
	}
}

// Run judges the TaskExecutors' silence once per heartbeat interval until
// ctx ends: one that has been silent for the heartbeat timeout is lost
// for every job it followed here.
func (r *Router) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			r.judgeSilence(time.Now())
			r.sweep()
		}
	}
}

// judgeSilence is the judge's tick: it drops the TaskExecutors silent past
// the timeout, and tells the JobMasters of the jobs they followed.
func (r *Router) judgeSilence(now time.Time) {
	type lost struct {
		id  string
		jms []*JobMaster
	}
	var gone []lost
	r.mu.Lock()
	r.judge.Tick(now)
	for id, link := range r.executors {
		if r.judge.Silence(link.heard, now) <= r.cfg.HeartbeatTimeout {
			continue
		}
		l := lost{id: id}
		for job := range link.jobs {
			if jm := r.masters[job]; jm != nil {
				l.jms = append(l.jms, jm)
			}
			r.unfollowLocked(id, job)
		}
		delete(r.executors, id)
		gone = append(gone, l)
	}
	r.mu.Unlock()
	reason := "no heartbeat for " + r.cfg.HeartbeatTimeout.String()
	for _, l := range gone {
		for _, jm := range l.jms {
			jm.post(func() { jm.lostExecutor(l.id, reason) })
		}
	}
}

// Add routes jobID's calls to jm. TaskExecutors that follow an older
// JobMaster of the job here are told to follow jm.
func (r *Router) Add(jobID string, jm *JobMaster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.masters[jobID] = jm
	for id := range r.followers[jobID] {
		if link := r.executors[id]; link != nil && link.jobs[jobID].Epoch < jm.cfg.Token.Epoch {
			r.oweLocked(link, &clusterv1.TaskExecutorJobAnswer{
				JobId: jobID, Action: clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_FOLLOW, JobMasterToken: protoToken(jm.cfg.Token),
			})
		}
	}
}

// Remove stops routing jobID's calls to jm (if it is still the one); the
// TaskExecutors that follow it hear at their next heartbeat that it is
// gone.
func (r *Router) Remove(jobID string, jm *JobMaster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.masters[jobID] != jm {
		return
	}
	delete(r.masters, jobID)
	delete(r.adopters, jm)
	for id := range r.followers[jobID] {
		if link := r.executors[id]; link != nil {
			r.oweLocked(link, &clusterv1.TaskExecutorJobAnswer{JobId: jobID, Action: clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_NOT_LEADER})
		}
	}
}

// route finds the JobMaster for a call and checks its token: an older
// token is stale, a newer one means this JobMaster was deposed.
func (r *Router) route(ctx context.Context, jobID string, t *jobplanev1.FencingToken) (*JobMaster, error) {
	if v := apierror.TokenViolation("job_master_token", t); v != nil {
		return nil, apierror.BadRequest(*v)
	}
	r.mu.Lock()
	jm := r.masters[jobID]
	r.mu.Unlock()
	token := tokenOf(t)
	switch {
	case jm == nil || token.Epoch > jm.cfg.Token.Epoch || !jm.valid():
		addr := ""
		if r.cfg.LeaderAddress != nil {
			addr = r.cfg.LeaderAddress(ctx, jobID)
		}
		return nil, apierror.NotLeader(election.Job(jobID), addr)
	case token != jm.cfg.Token:
		return nil, apierror.StaleToken(election.Job(jobID), jm.cfg.Token.SessionID, jm.cfg.Token.Epoch)
	}
	return jm, nil
}

// followLocked records that TaskExecutor id follows job's JobMaster of
// token here; r.mu must be held.
func (r *Router) followLocked(id string, link *executorLink, job string, token election.Token) {
	link.jobs[job] = token
	f := r.followers[job]
	if f == nil {
		f = make(map[string]struct{})
		r.followers[job] = f
	}
	f[id] = struct{}{}
}

// unfollowLocked records that TaskExecutor id no longer follows job here;
// r.mu must be held.
func (r *Router) unfollowLocked(id, job string) {
	if link := r.executors[id]; link != nil {
		delete(link.jobs, job)
		delete(link.owed, job)
	}
	if f := r.followers[job]; f != nil {
		delete(f, id)
		if len(f) == 0 {
			delete(r.followers, job)
		}
	}
}

// oweLocked queues an answer for the TaskExecutor's next heartbeat; a
// later answer about the same job replaces an earlier one. r.mu must be
// held.
func (r *Router) oweLocked(link *executorLink, a *clusterv1.TaskExecutorJobAnswer) {
	if link.owed == nil {
		link.owed = make(map[string]*clusterv1.TaskExecutorJobAnswer)
	}
	link.owed[a.GetJobId()] = a
}

// registered records a TaskExecutor's registration with a JobMaster here
// (a call from it: it is heard) and that it follows the JobMaster's job.
// It returns the process's client of the TaskExecutor, shared by every
// JobMaster here: one per TaskExecutor, not one per job.
func (r *Router) registered(id, address, job string, token election.Token) *executorClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	link := r.linkLocked(id, address)
	link.heard = r.judge.Heard(time.Now())
	r.followLocked(id, link, job, token)
	return r.clientLocked(link)
}

// clientOf returns the process's client of the TaskExecutor, as
// registered does, without taking it as heard or following any job.
func (r *Router) clientOf(id, address string) *executorClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clientLocked(r.linkLocked(id, address))
}

// clientLocked returns the link's client, made if new; r.mu must be held.
func (r *Router) clientLocked(link *executorLink) *executorClient {
	if link.client == nil {
		link.client = &executorClient{
			TaskExecutorServiceClient: clusterv1connect.NewTaskExecutorServiceClient(r.cfg.HTTPClient, link.address, endpoint.ClientOptions()...),
		}
	}
	return link.client
}

// linkLocked returns the TaskExecutor's link, made if new; r.mu must be
// held.
func (r *Router) linkLocked(id, address string) *executorLink {
	link := r.executors[id]
	if link == nil {
		link = &executorLink{address: address, heard: r.judge.Heard(time.Now()), jobs: make(map[string]election.Token)}
		r.executors[id] = link
	}
	if address != "" && address != link.address {
		link.address, link.client = address, nil
	}
	return link
}

// heard records a call from a TaskExecutor known here.
func (r *Router) heard(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if link := r.executors[id]; link != nil {
		link.heard = r.judge.Heard(time.Now())
	}
}

// lastHeard returns when the TaskExecutor was last heard in this process;
// zero if it is unknown here.
func (r *Router) lastHeard(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if link := r.executors[id]; link != nil {
		return link.heard.At
	}
	return time.Time{}
}

// requestReport asks the TaskExecutor to report job complete at its next
// heartbeat.
func (r *Router) requestReport(id, job string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if link := r.executors[id]; link != nil {
		r.oweLocked(link, &clusterv1.TaskExecutorJobAnswer{JobId: job, Action: clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_REPORT})
	}
}

// after runs f once d has passed, on the process's one deadline timer.
func (r *Router) after(d time.Duration, f func()) (stop func() bool) {
	return r.deadlines.after(d, f)
}

// HeartbeatFromTaskExecutor implements JobMasterServiceHandler: the
// TaskExecutor is heard, the jobs it follows here are updated from what
// it reports, each report is handed to its job's JobMaster, and the answer
// names the jobs that need the TaskExecutor's attention.
func (r *Router) HeartbeatFromTaskExecutor(_ context.Context, req *clusterv1.HeartbeatFromTaskExecutorRequest) (*clusterv1.HeartbeatFromTaskExecutorResponse, error) {
	id, address := req.GetTaskExecutorId(), req.GetAddress()
	if id == "" || address == "" {
		return nil, apierror.BadRequest(apierror.Field{Path: "task_executor_id, address", Description: "required"})
	}
	resp := &clusterv1.HeartbeatFromTaskExecutorResponse{}
	type delivery struct {
		jm     *JobMaster
		report *clusterv1.TaskExecutorJobReport
	}
	var deliveries []delivery
	var adopters []*JobMaster
	r.mu.Lock()
	link := r.executors[id]
	if link == nil && !req.GetFull() {
		resp.FullRequested = true // what it followed before is unknown here
	}
	link = r.linkLocked(id, address)
	link.heard = r.judge.Heard(time.Now())
	released := map[string]bool{} // jobs it followed here and holds nothing of any more
	if req.GetFull() {
		for job := range link.jobs {
			r.unfollowLocked(id, job)
			released[job] = true
		}
	}
	answered := map[string]bool{}
	for _, jr := range req.GetJobs() {
		job := jr.GetJobId()
		if !jr.GetFollowing() {
			if _, ok := link.jobs[job]; ok {
				released[job] = true
			}
			r.unfollowLocked(id, job)
			continue
		}
		delete(released, job)
		token := tokenOf(jr.GetJobMasterToken())
		jm := r.masters[job]
		switch {
		case jm == nil || token.Epoch > jm.cfg.Token.Epoch || !jm.valid():
			r.unfollowLocked(id, job)
			resp.Jobs = append(resp.Jobs, &clusterv1.TaskExecutorJobAnswer{JobId: job, Action: clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_NOT_LEADER})
			answered[job] = true
		case token != jm.cfg.Token:
			// Older, or another grant's of an equal epoch: its report is
			// not taken, and the TaskExecutor learns the current token.
			r.followLocked(id, link, job, token)
			resp.Jobs = append(resp.Jobs, &clusterv1.TaskExecutorJobAnswer{
				JobId: job, Action: clusterv1.TaskExecutorJobAction_TASK_EXECUTOR_JOB_ACTION_FOLLOW, JobMasterToken: protoToken(jm.cfg.Token),
			})
			answered[job] = true
		default:
			r.followLocked(id, link, job, token)
			if len(jr.GetAttempts()) > 0 || jr.GetComplete() {
				deliveries = append(deliveries, delivery{jm, jr})
			}
			if jm.adopting.Load() {
				adopters = append(adopters, jm)
			}
		}
	}
	for job, a := range link.owed {
		if !answered[job] {
			resp.Jobs = append(resp.Jobs, a)
		}
	}
	link.owed = nil
	if r.cfg.LeaseUntil != nil {
		if until := r.cfg.LeaseUntil(); !until.IsZero() {
			resp.LeaseRemaining = durationpb.New(max(time.Until(until), 0))
			if r.cfg.TaskLease > 0 && time.Now().Before(until) {
				resp.TaskLease = durationpb.New(r.cfg.TaskLease)
			}
		}
	}
	var releases []*JobMaster
	for job := range released {
		if jm := r.masters[job]; jm != nil {
			releases = append(releases, jm)
		}
	}
	r.mu.Unlock()
	for _, d := range deliveries {
		d.jm.post(func() { d.jm.fromReport(id, address, d.report) })
	}
	for _, jm := range releases {
		jm.post(func() { jm.released(id) })
	}
	if len(adopters) > 0 {
		r.adopt(id, address, adopters)
	}
	return resp, nil
}

// adoptBatch bounds the jobs of one AdoptAttempts call.
const adoptBatch = 256

// adopt asks TaskExecutor id what it holds of each job whose JobMaster
// adopts and has not asked it yet: in one AdoptAttempts call for up to
// adoptBatch jobs, rather than one call per job. Each JobMaster takes its
// entry of the answer on its own goroutine.
func (r *Router) adopt(id, address string, adopters []*JobMaster) {
	var (
		asking []*JobMaster
		claims []*clusterv1.JobAdoption
		client *executorClient
	)
	for _, jm := range adopters {
		if a := jm.claimAdoption(id); a != nil {
			asking, claims = append(asking, jm), append(claims, a)
		}
	}
	if len(asking) > 0 {
		client = r.clientOf(id, address)
	}
	for from := 0; from < len(asking); from += adoptBatch {
		to := min(from+adoptBatch, len(asking))
		batch, req := asking[from:to], &clusterv1.AdoptAttemptsRequest{Jobs: claims[from:to]}
		// The call runs as one of the JobMasters' calls: it ends with that
		// JobMaster, and the others ask again at the next heartbeat.
		batch[0].goRPC(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			resp, err := client.AdoptAttempts(ctx, req)
			if err == nil && len(resp.GetJobs()) != len(batch) {
				err = fmt.Errorf("AdoptAttempts answered %d entries for %d jobs", len(resp.GetJobs()), len(batch))
			}
			refused := map[int32]*jobplanev1.ItemError{}
			for _, e := range resp.GetRefused() {
				refused[e.GetIndex()] = e
			}
			// The membership is read once for the whole answer, as the
			// sweep does: a copy per job cost a new leader 6% of its CPU
			// while it took 110,000 jobs over (issue 33).
			members, _ := r.members()
			for i, jm := range batch {
				var held *clusterv1.AdoptedJob
				if err == nil {
					held = resp.GetJobs()[i]
				}
				jm.post(func() { jm.adoptAnswer(id, address, held, refused[int32(i)], err, members) })
			}
		})
	}
}

// adoptionBegan counts jm among the adopting JobMasters, and has the
// members asked soon: the JobMasters that begin adopting together are
// asked in the same calls.
func (r *Router) adoptionBegan(jm *JobMaster) {
	if r.cfg.Members == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adopters[jm] = struct{}{}
	if !r.sweepQueued {
		r.sweepQueued = true
		r.after(sweepDelay, r.sweep)
	}
}

// sweepDelay gathers the JobMasters that begin adopting at about the same
// time (a new leader recovering its jobs) into one sweep.
const sweepDelay = 20 * time.Millisecond

// members returns RouterConfig.Members' answer; false without it.
func (r *Router) members() (map[string]string, bool) {
	if r.cfg.Members == nil {
		return nil, false
	}
	return r.cfg.Members()
}

// adoptionEnded stops counting jm among the adopting JobMasters.
func (r *Router) adoptionEnded(jm *JobMaster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.adopters, jm)
}

// sweep asks every member TaskExecutor that registered here what it holds
// of the jobs of the adopting JobMasters that have not asked it yet, and
// has each of those JobMasters check whether every member has answered.
// It costs nothing while no JobMaster adopts.
func (r *Router) sweep() {
	r.mu.Lock()
	r.sweepQueued = false
	adopters := make([]*JobMaster, 0, len(r.adopters))
	for jm := range r.adopters {
		adopters = append(adopters, jm)
	}
	r.mu.Unlock()
	if len(adopters) == 0 || r.cfg.Members == nil {
		return
	}
	members, ok := r.cfg.Members()
	if !ok {
		return
	}
	for id, address := range members {
		if address != "" {
			r.adopt(id, address, adopters)
		}
	}
	for _, jm := range adopters {
		jm.post(func() { jm.adoptionAnswered(members) })
	}
}

func tokenOf(t *jobplanev1.FencingToken) election.Token {
	return election.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}
