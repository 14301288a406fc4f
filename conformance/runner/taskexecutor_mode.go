package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// teEnv is what a case of the TaskExecutor mode runs against: the
// runner's HA store (an embedded etcd member served as HAStoreService),
// where the runner leads `jobmanager`; the JobManager side (teCluster)
// served on loopback at the address that leadership publishes; and the
// TaskExecutor under test, a process the runner starts.
type teEnv struct {
	log       *Log
	dir       string
	wire      wire
	etcd      *etcdstore.Store
	storeHS   *httpServer
	cluster   *teCluster
	clusterHS *httpServer
	http      *http.Client
	proc      *serverProc

	// session holds the runner's leaderships of `jobmanager`, one at a
	// time; rm is the current one.
	session hastore.Session
	rm      *hastore.Leadership
	// jobs are the runner's leaderships of the jobs' elections
	// (`job/<job_id>`), the current one per job, each in a session of its
	// own (jobSessions): a TaskExecutor takes a JobMaster token on a
	// JobMaster's own call only once the store shows it as the job's grant
	// (since 1.2).
	jobs        map[string]*hastore.Leadership
	jobSessions []hastore.Session
}

// newTEEnv starts the store and the JobManager side, takes the
// `jobmanager` leadership, and starts the TaskExecutor command.
func newTEEnv(ctx context.Context, cfg Config, index int) (_ *teEnv, err error) {
	dir, err := os.MkdirTemp("", "jobplane-conformance-te-")
	if err != nil {
		return nil, err
	}
	// The runner calls the TaskExecutor at the address it registers,
	// https:// too if it serves TLS (--tls-ca names the authorities).
	e := &teEnv{log: &Log{}, dir: dir, wire: cfg.wire, http: newHTTPClient("", cfg.wire.rootCAs)}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if e.etcd, err = etcdstore.Open(octx, etcdstore.OpenConfig{DataDir: filepath.Join(dir, "etcd"), Logger: quiet}); err != nil {
		return nil, fmt.Errorf("open the HA store: %w", err)
	}
	path, h := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: e.etcd, Logger: quiet}).Path()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	if e.storeHS, err = serve("", mux); err != nil {
		return nil, fmt.Errorf("serve the HA store: %w", err)
	}
	e.cluster = newTECluster(e.log)
	cmux := http.NewServeMux()
	cmux.Handle(clusterv1connect.NewResourceManagerServiceHandler(e.cluster))
	cmux.Handle(clusterv1connect.NewJobMasterServiceHandler(teJobMaster{c: e.cluster}))
	if e.clusterHS, err = serve("", cmux); err != nil {
		return nil, fmt.Errorf("serve the JobManager side: %w", err)
	}
	if e.session, err = e.etcd.OpenSession(octx, hastore.SessionConfig{TTL: 30 * time.Second}); err != nil {
		return nil, fmt.Errorf("open a session: %w", err)
	}
	if err := e.lead(octx); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	vars := map[string]string{"hastore": e.storeHS.URL(), "listen": addr, "data": filepath.Join(dir, "taskexecutor"), "id": fmt.Sprintf("conformance-te-%d", index)}
	if e.proc, err = startProc("taskexecutor", filepath.Join(dir, "output"), cfg.TaskExecutorCommand, vars); err != nil {
		return nil, fmt.Errorf("start the TaskExecutor: %w", err)
	}
	return e, nil
}

// lead takes a new `jobmanager` leadership, publishing the JobManager
// side's address, after resigning the current one: the
// ResourceManager's token changes, as after a failover.
func (e *teEnv) lead(ctx context.Context) error {
	if e.rm != nil {
		if err := e.rm.Resign(ctx); err != nil {
			return fmt.Errorf("resign jobmanager: %w", err)
		}
		s, err := e.etcd.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
		if err != nil {
			return fmt.Errorf("open a session: %w", err)
		}
		_ = e.session.Close(ctx)
		e.session = s
	}
	l, err := e.session.Campaign(ctx, election.JobManager, e.clusterHS.URL())
	if err != nil {
		return fmt.Errorf("campaign for jobmanager: %w", err)
	}
	e.rm = l
	e.cluster.setResourceManager(l.Token())
	e.log.Add(Event{Source: "runner", Op: "lead", Key: election.JobManager, Token: l.Token()})
	return nil
}

// leadJob takes a new leadership of the job's election, publishing the
// JobManager side's address, after resigning the current one: the job's
// JobMaster token changes, as after a failover, and the store shows the
// new one as the job's grant.
func (e *teEnv) leadJob(ctx context.Context, jobID string) (election.Token, error) {
	if l := e.jobs[jobID]; l != nil {
		if err := l.Resign(ctx); err != nil {
			return election.Token{}, fmt.Errorf("resign %s: %w", election.Job(jobID), err)
		}
	}
	s, err := e.etcd.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		return election.Token{}, fmt.Errorf("open a session: %w", err)
	}
	e.jobSessions = append(e.jobSessions, s)
	l, err := s.Campaign(ctx, election.Job(jobID), e.clusterHS.URL())
	if err != nil {
		return election.Token{}, fmt.Errorf("campaign for %s: %w", election.Job(jobID), err)
	}
	if e.jobs == nil {
		e.jobs = make(map[string]*hastore.Leadership)
	}
	e.jobs[jobID] = l
	e.log.Add(Event{Source: "runner", Op: "lead", Key: election.Job(jobID), Token: l.Token()})
	return l.Token(), nil
}

// taskExecutor returns a client of the TaskExecutor at address.
func (e *teEnv) taskExecutor(address string) clusterv1connect.TaskExecutorServiceClient {
	return clusterv1connect.NewTaskExecutorServiceClient(e.http, address, e.wire.options()...)
}

func (e *teEnv) close() {
	if e.proc != nil && !e.proc.exited() {
		e.proc.kill()
	}
	if e.session != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.session.Close(ctx)
		cancel()
	}
	for _, s := range e.jobSessions {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Close(ctx)
		cancel()
	}
	if e.clusterHS != nil {
		e.clusterHS.Close()
	}
	if e.storeHS != nil {
		e.storeHS.Close()
	}
	if e.etcd != nil {
		_ = e.etcd.Close()
	}
	e.http.CloseIdleConnections()
	_ = os.RemoveAll(e.dir)
}

// runTaskExecutorCase runs one case of the TaskExecutor mode in an
// environment of its own and returns its failures and, for --trace, its
// events and the TaskExecutor's output.
func runTaskExecutorCase(ctx context.Context, cfg Config, c Case, index int) (failures []string, trace string) {
	ctx, cancel := context.WithTimeout(ctx, cfg.CaseTimeout)
	defer cancel()
	e, err := newTEEnv(ctx, cfg, index)
	if err != nil {
		return []string{"environment: " + err.Error()}, ""
	}
	defer e.close()
	t := &T{ctx: ctx, te: e, ids: fmt.Sprintf("c%02d-", index)}
	failures, _ = t.run(cfg.CaseTimeout, func() { c.Run(t) })
	if cfg.Trace && (len(failures) > 0 || cfg.Verbose) {
		var b strings.Builder
		fmt.Fprintf(&b, "--- events of %s\n", c.Name)
		evs := e.log.Events(nil)
		for _, ev := range evs {
			fmt.Fprintf(&b, "    %7.3fs %v\n", ev.Time.Sub(evs[0].Time).Seconds(), ev)
		}
		fmt.Fprintf(&b, "--- output of the TaskExecutor (last lines)\n%s\n", lastLines(e.proc.output(), 200))
		trace = b.String()
	}
	return failures, trace
}
