package failover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobplane/jobplane/bench"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/chaos"
	"github.com/jobplane/jobplane/server/localcluster"
)

// BenchmarkRecoveryAtScale measures a takeover at scale (issue 33, target
// 6), for `make bench` (row 11): a leader with $RECOVER_RUNNING one-task
// jobs running (default 10,000, on 10 TaskExecutors with just enough
// slots) and $RECOVER_WAITING more waiting for slots (default 100,000) is
// SIGKILLed, and the standby takes the jobs over. From the SIGKILL it
// measures:
//
//   - ack: a client that retries SubmitJob of a fresh job at the standby
//     (one call at a time, each within a second, 5 ms apart after a quick
//     refusal) gets its first acknowledgement;
//   - adopted: the new leader's JobMasters have adopted the running task
//     of every job that ran before the SIGKILL (the time of the last
//     "adopted attempts" line of the new leader's log that completes
//     them; a redeployed task is no adoption);
//   - grant: the new leader logged "leadership granted";
//
// and reports each from the SIGKILL and from the grant, the new leader's
// RSS once every task is adopted and at its peak, the tasks that started
// again after the jobs first ran (adoption wants none), the jobs that
// failed and the running jobs that the new leader does not report
// RUNNING at the end. Side by side, the same takeover with one running
// job and none waiting is the floor: the grant follows the SIGKILL by
// about the session TTL however many jobs there are.
//
// The jobs' ids interleave the running ones among the waiting ones, so
// that a recovery in id order does not find the running ones first. The
// jobmanagers run with --submit-rate 0 (the bench submits from one
// address far above the per-client default) on one etcd member, which
// the SIGKILL leaves alone. With $RECOVER_PPROF set to a directory, the
// jobmanagers serve their profiler, and a CPU profile of the new leader
// over $RECOVER_PPROF_SECONDS from the SIGKILL (default 20) and a heap
// profile once every task is adopted are written there, with the new
// leader's log and what the store and the new leader counted over the
// takeover. $RECOVER_JM_ARGS adds flags to the jobmanagers', and
// $RECOVER_TE_ARGS to the TaskExecutors', for experiments (such as
// --task-lease 0, --session-ttl 10s, or --debug-listen 127.0.0.1:0 for
// the TaskExecutors); `make bench` sets none.
//
// Each benchmark iteration runs the floor and the takeover at scale; run
// it with -benchtime=1x.
func BenchmarkRecoveryAtScale(b *testing.B) {
	waiting := envInt(b, "RECOVER_WAITING", 100_000)
	running := envInt(b, "RECOVER_RUNNING", 10_000)
	prof := recoverProfile{dir: os.Getenv("RECOVER_PPROF"), window: time.Duration(envInt(b, "RECOVER_PPROF_SECONDS", 20)) * time.Second}
	if _, _, err := localcluster.Binaries(); err != nil {
		b.Fatal(err)
	}
	var all, floor []recovery
	for range b.N {
		for _, run := range []struct {
			running, waiting int
			prof             recoverProfile
			into             *[]recovery
		}{{1, 0, recoverProfile{}, &floor}, {running, waiting, prof, &all}} {
			// Submissions at about 1,000 jobs/s, and room for a slow takeover.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(run.running+run.waiting)*time.Millisecond+15*time.Minute)
			r, err := measureRecovery(ctx, b, run.running, run.waiting, 10, run.prof)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			*run.into = append(*run.into, r)
		}
	}
	for _, r := range []struct {
		prefix string
		rs     []recovery
	}{{"recover-", all}, {"recover-floor-", floor}} {
		each := func(f func(recovery) float64) float64 {
			var xs []float64
			for _, x := range r.rs {
				xs = append(xs, f(x))
			}
			return bench.Median(xs)
		}
		b.ReportMetric(each(func(x recovery) float64 { return ms(x.ack.Sub(x.killed)) }), r.prefix+"kill-ack-ms")
		b.ReportMetric(each(func(x recovery) float64 { return ms(x.adopted.Sub(x.killed)) }), r.prefix+"kill-adopted-ms")
		b.ReportMetric(each(func(x recovery) float64 { return ms(x.granted.Sub(x.killed)) }), r.prefix+"kill-grant-ms")
		b.ReportMetric(each(func(x recovery) float64 { return ms(x.ack.Sub(x.granted)) }), r.prefix+"grant-ack-ms")
		b.ReportMetric(each(func(x recovery) float64 { return ms(x.adopted.Sub(x.granted)) }), r.prefix+"grant-adopted-ms")
		b.ReportMetric(each(func(x recovery) float64 { return x.rss / (1 << 20) }), r.prefix+"rss-mib")
		b.ReportMetric(each(func(x recovery) float64 { return x.peak / (1 << 20) }), r.prefix+"peak-rss-mib")
		b.ReportMetric(each(func(x recovery) float64 { return x.oldRSS / (1 << 20) }), r.prefix+"old-rss-mib")
		b.ReportMetric(each(func(x recovery) float64 { return float64(x.restarted) }), r.prefix+"restarts")
		b.ReportMetric(each(func(x recovery) float64 { return float64(x.failed) }), r.prefix+"failed")
		b.ReportMetric(each(func(x recovery) float64 { return float64(x.notAdopted) }), r.prefix+"not-adopted")
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(running), "recover-running")
	b.ReportMetric(float64(waiting), "recover-waiting")
}

// recoverProfile says where measureRecovery writes the new leader's
// profiles: a CPU profile over window from the SIGKILL, and a heap
// profile once every task is adopted. An empty dir writes none.
type recoverProfile struct {
	dir    string
	window time.Duration
}

// recovery is what one takeover measured.
type recovery struct {
	killed  time.Time // the SIGKILL of the leader
	granted time.Time // the new leader logged its grant
	ack     time.Time // the first SubmitJob acknowledged by the new leader
	// adopted is when the last task running before the SIGKILL was
	// adopted, or the end of the wait if some never were.
	adopted time.Time
	// rss and peak are the new leader's VmRSS once every task was
	// adopted and its VmHWM at the end; oldRSS the old leader's VmRSS
	// just before the SIGKILL; in bytes.
	rss, peak, oldRSS float64
	restarted         int // attempts of the running jobs started after they first ran
	failed            int // jobs FAILED at the new leader at the end; -1 if it did not answer
	notAdopted        int // running jobs whose task the new leader did not adopt
	// cores says, per kind of process, the cores it used from the SIGKILL
	// until every task was adopted (or the wait ended).
	cores string
}

// coreMeters measure the cores each kind of process of a cluster uses:
// the new leader, the etcd member, the TaskExecutors' HA-store process,
// the TaskExecutors together.
type coreMeters struct {
	kinds  []string
	meters [][]*bench.CPUMeter
}

// newCoreMeters starts measuring the cluster's processes, with leader as
// the jobmanager.
func newCoreMeters(c *localcluster.ProcessCluster, leader *localcluster.JobManagerProcess) (*coreMeters, error) {
	m := &coreMeters{}
	add := func(kind string, ps ...*localcluster.Process) error {
		var ms []*bench.CPUMeter
		for _, p := range ps {
			cm, err := bench.NewCPUMeter(p.PID())
			if err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			ms = append(ms, cm)
		}
		m.kinds, m.meters = append(m.kinds, kind), append(m.meters, ms)
		return nil
	}
	var etcd, tes []*localcluster.Process
	for _, e := range c.Etcd() {
		etcd = append(etcd, e.Process)
	}
	for _, te := range c.TaskExecutors() {
		tes = append(tes, te.Process)
	}
	for _, err := range []error{add("jobmanager", leader.Process), add("etcd", etcd...), add("hastore", c.HAStore()), add("taskexecutors", tes...)} {
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// read returns the cores of each kind since the meters started.
func (m *coreMeters) read() string {
	var out []string
	for i, kind := range m.kinds {
		sum := 0.0
		for _, cm := range m.meters[i] {
			c, err := cm.Cores()
			if err != nil {
				return fmt.Sprintf("%s: %v", kind, err)
			}
			sum += c
		}
		out = append(out, fmt.Sprintf("%s %.2f", kind, sum))
	}
	return strings.Join(out, ", ")
}

// takeover is what the new leader's log and the first acknowledged
// SubmitJob say of a takeover.
type takeover struct {
	granted time.Time // the new leader's first "leadership granted"
	adopted time.Time // the last adoption of a running job's task
	// pending are the running jobs whose task was not adopted yet.
	pending map[string]bool
	// ended counts the adoptions that ended by deploying what no
	// TaskExecutor held, by why they ended.
	ended  map[string]int
	answer submitFirst // the first SubmitJob's, once acked
	acked  bool
}

// follow reads the new leader's log as it grows, every 50 ms, until every
// pending job's task is adopted, or nothing more was adopted for 20 s
// after the first SubmitJob was answered (on acked), or bound ends (the
// task lease has long passed by then).
func (t *takeover) follow(bound context.Context, tail *logTail, acked <-chan submitFirst) error {
	progress := time.Now()
	for len(t.pending) > 0 && bound.Err() == nil {
		if !t.acked {
			select {
			case t.answer = <-acked:
				t.acked = true
			default:
			}
		}
		if t.acked && time.Since(progress) > 20*time.Second && time.Since(t.answer.at) > 20*time.Second {
			return nil
		}
		lines, err := tail.lines()
		if err != nil {
			return err
		}
		for _, line := range lines {
			at, msg, attrs, ok := parseLogLine(line)
			switch {
			case !ok:
			case msg == "leadership granted" && t.granted.IsZero():
				t.granted = at
			case msg == "adopted attempts" && t.pending[attrs["job"]] && attrs["attempts"] != "0":
				delete(t.pending, attrs["job"])
				t.adopted, progress = at, time.Now()
			case msg == "adoption over; deploying what no TaskExecutor holds":
				if t.ended == nil {
					t.ended = map[string]int{}
				}
				t.ended[attrs["why"]]++
			}
		}
		if len(t.pending) > 0 {
			_ = sleep(bound, 50*time.Millisecond)
		}
	}
	return nil
}

// takeoverBound bounds the wait for a takeover's first acknowledgement
// and adoptions.
const takeoverBound = 5 * time.Minute

// storeLoad is what the store and the processes that use it counted
// over a takeover: the largest deltas of the counters of the etcd
// members, the TaskExecutors' HA-store process and the new leader.
type storeLoad struct {
	// summary says, once read, what the etcd members did: their range
	// and txn requests and WAL fsyncs.
	summary string

	hc     *http.Client
	urls   []string // each process's /metrics base URL
	names  []string
	before []metrics
}

// newStoreLoad scrapes the counters of the etcd members, the
// TaskExecutors' HA-store process and leader, to read after a takeover.
func newStoreLoad(ctx context.Context, c *localcluster.ProcessCluster, leader *localcluster.JobManagerProcess) (*storeLoad, error) {
	l := &storeLoad{hc: &http.Client{Timeout: 10 * time.Second}}
	for _, m := range c.Etcd() {
		l.urls, l.names = append(l.urls, m.ClientURL()), append(l.names, m.Name)
	}
	l.urls, l.names = append(l.urls, c.HAStore().URL(), leader.URL()), append(l.names, c.HAStore().Name, leader.Name)
	for _, u := range l.urls {
		m, err := scrapeMetrics(ctx, l.hc, u)
		if err != nil {
			return nil, err
		}
		l.before = append(l.before, m)
	}
	return l, nil
}

// read returns, per process, its 12 largest counter deltas (series
// ending in _total or _count) since newStoreLoad, and the mean WAL fsync
// of the etcd members.
func (l *storeLoad) read(ctx context.Context) []string {
	defer l.hc.CloseIdleConnections()
	var out []string
	for i, u := range l.urls {
		after, err := scrapeMetrics(ctx, l.hc, u)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", l.names[i], err))
			continue
		}
		type delta struct {
			series string
			d      float64
		}
		var ds []delta
		for s, v := range after {
			name, _, _ := strings.Cut(s, "{")
			if d := v - l.before[i][s]; d > 0 && (strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count")) && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
				ds = append(ds, delta{s, d})
			}
		}
		slices.SortFunc(ds, func(a, b delta) int { return cmp.Compare(b.d, a.d) })
		var parts []string
		for _, d := range ds[:min(12, len(ds))] {
			parts = append(parts, fmt.Sprintf("%s +%.0f", d.series, d.d))
		}
		line := fmt.Sprintf("%s over the takeover: %s", l.names[i], strings.Join(parts, "; "))
		if h := after.histogram("etcd_disk_wal_fsync_duration_seconds").since(l.before[i].histogram("etcd_disk_wal_fsync_duration_seconds")); h.count > 0 {
			fsyncs := fmt.Sprintf("WAL fsyncs %.0f, mean %.2f ms", h.count, 1000*h.sum/h.count)
			if c := after.histogram("etcd_disk_backend_commit_duration_seconds").since(l.before[i].histogram("etcd_disk_backend_commit_duration_seconds")); c.count > 0 {
				fsyncs += fmt.Sprintf("; backend commits %.0f, mean %.2f ms", c.count, 1000*c.sum/c.count)
			}
			line += "; " + fsyncs
			requests := func(typ string) float64 {
				s := series("etcd_server_request_duration_seconds_count", "success", "true", "type", typ)
				return after[s] - l.before[i][s]
			}
			l.summary = fmt.Sprintf("%s: %.0f ranges, %.0f txns, %s", l.names[i], requests("Range"), requests("Txn"), fsyncs)
		}
		out = append(out, line)
	}
	return out
}

// measureRecovery starts two jobmanagers on one etcd member and tes
// TaskExecutors with just enough slots for running one-task jobs, runs
// those jobs, submits waiting more that wait for slots, SIGKILLs the
// leader and measures the standby's takeover.
func measureRecovery(ctx context.Context, b *testing.B, running, waiting, tes int, prof recoverProfile) (recovery, error) {
	var r recovery
	args := append([]string{"--submit-rate", "0"}, strings.Fields(os.Getenv("RECOVER_JM_ARGS"))...)
	if prof.dir != "" {
		args = append(args, "--debug-listen", "127.0.0.1:0")
	}
	c, err := localcluster.StartProcessCluster(ctx, localcluster.ProcessClusterConfig{
		EtcdMembers: 1, JobManagers: 2, TaskExecutors: tes, Slots: (running + tes - 1) / tes, JobManagerArgs: args,
		TaskExecutorArgs: strings.Fields(os.Getenv("RECOVER_TE_ARGS")),
	})
	if err != nil {
		return r, err
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		return r, err
	}
	defer cl.Close()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		return r, err
	}
	standby := c.JobManagers()[0]
	if standby == l {
		standby = c.JobManagers()[1]
	}

	// Running job i is job i*step: the running jobs are spread evenly
	// over the listing of plans, which is in id order.
	total, step := running+waiting, (running+waiting)/running
	var runIDs, waitIDs []string
	for k := range total {
		id := fmt.Sprintf("recover-%07d", k)
		if k%step == 0 && len(runIDs) < running {
			runIDs = append(runIDs, id)
		} else {
			waitIDs = append(waitIDs, id)
		}
	}
	begin := time.Now()
	if err := submitAll(ctx, cl, runIDs, func(id string) *jobplanev1.JobGraph { return sleepJob(id, 1, 24*time.Hour) }); err != nil {
		return r, err
	}
	ran, err := waitStarted(ctx, c, runIDs)
	if err != nil {
		return r, err
	}
	first := time.Now() // every running job's task has started
	b.Logf("%d jobs running %v after the first submission", len(ran), first.Sub(begin).Round(time.Millisecond))
	if err := submitAll(ctx, cl, waitIDs, func(id string) *jobplanev1.JobGraph { return sleepJob(id, 1, 24*time.Hour) }); err != nil {
		return r, err
	}
	took := time.Since(first)
	b.Logf("%d waiting jobs submitted in %v (%.0f/s)", len(waitIDs), took.Round(time.Millisecond), float64(len(waitIDs))/took.Seconds())
	if err := waitQueued(ctx, l, len(waitIDs)); err != nil {
		b.Logf("before the SIGKILL: %v", err)
	}
	// Every running job still runs its first attempt.
	if ran, err = waitStarted(ctx, c, runIDs); err != nil {
		return r, err
	}
	rss, err := bench.RSSBytes(l.PID())
	if err != nil {
		return r, err
	}
	r.oldRSS = float64(rss)

	tail := &logTail{path: standby.LogPath()}
	if _, err := tail.lines(); err != nil { // skip what the standby logged so far
		return r, err
	}
	var (
		profiling sync.WaitGroup
		profErr   error
	)
	if prof.dir != "" {
		addr, err := debugAddr(standby.LogPath())
		if err != nil {
			return r, err
		}
		profiling.Go(func() {
			profErr = fetchProfile(ctx, addr, prof.window, filepath.Join(prof.dir, fmt.Sprintf("recover-%d-cpu.pprof", total)))
		})
	}
	meters, err := newCoreMeters(c, standby)
	if err != nil {
		return r, err
	}
	load, err := newStoreLoad(ctx, c, standby)
	if err != nil {
		return r, err
	}
	r.killed = time.Now()
	if err := l.Signal(syscall.SIGKILL); err != nil {
		return r, err
	}
	// The takeover gets takeoverBound: what has not happened by then is
	// reported as not happened.
	bound, cancel := context.WithTimeout(ctx, takeoverBound)
	defer cancel()
	acked := make(chan submitFirst, 1)
	go func() { acked <- submitUntilAck(bound, standby, "recover-fresh") }()

	tk := &takeover{pending: map[string]bool{}}
	for _, iv := range ran {
		tk.pending[iv.JobID] = true
	}
	if err := tk.follow(bound, tail, acked); err != nil {
		return r, err
	}
	r.granted, r.adopted = tk.granted, tk.adopted
	r.cores = meters.read()
	loaded := load.read(ctx)
	if prof.dir != "" {
		// The benchmark's log keeps only its first lines: these go apart.
		_ = os.WriteFile(filepath.Join(prof.dir, fmt.Sprintf("recover-%d-load.txt", total)), []byte(strings.Join(loaded, "\n")+"\n"), 0o644)
	}
	if len(tk.pending) > 0 {
		r.adopted = time.Now()
		b.Logf("%d of %d running jobs not adopted %v after the SIGKILL", len(tk.pending), len(ran), r.adopted.Sub(r.killed).Round(time.Millisecond))
	}
	if rss, err = bench.RSSBytes(standby.PID()); err != nil {
		return r, err
	}
	r.rss = float64(rss)
	if prof.dir != "" {
		if addr, err := debugAddr(standby.LogPath()); err == nil {
			if err := fetchDebug(ctx, addr, "/debug/pprof/heap", filepath.Join(prof.dir, fmt.Sprintf("recover-%d-heap.pprof", total))); err != nil {
				return r, err
			}
		}
	}
	if !tk.acked {
		tk.answer = <-acked
	}
	answer := tk.answer
	r.ack = answer.at
	if answer.err != nil {
		r.ack = r.killed.Add(takeoverBound)
		b.Logf("no SubmitJob acknowledged within %v of the SIGKILL (counted as %v): %v", takeoverBound, takeoverBound, answer.err)
	}
	if r.granted.IsZero() {
		return r, errors.New("the new leader logged no grant")
	}
	b.Logf("%d running + %d waiting jobs: SIGKILL → grant %v → first ack %v (%d refusals as a standby until %v, %d calls timed out) → every task adopted %v; adoption ended by: %v; cores from the SIGKILL until then: %s; %s",
		len(ran), len(waitIDs), r.granted.Sub(r.killed).Round(time.Millisecond), r.ack.Sub(r.killed).Round(time.Millisecond),
		answer.notLeader, answer.lastNotLeader.Sub(r.killed).Round(time.Millisecond), answer.timeouts, r.adopted.Sub(r.killed).Round(time.Millisecond), tk.ended, r.cores, load.summary)

	// The checks, after the measurement: no task started again, none ran
	// twice at once, every running job RUNNING at the new leader, none
	// failed.
	profiling.Wait()
	if profErr != nil {
		return r, profErr
	}
	ivs, err := chaos.Attempts(c.TaskExecutors())
	if err != nil {
		return r, err
	}
	if err := chaos.CheckAttempts(ivs); err != nil {
		return r, err
	}
	var ranIDs []string
	ranSet := map[string]bool{}
	for _, iv := range ran {
		ranIDs = append(ranIDs, iv.JobID)
		ranSet[iv.JobID] = true
	}
	others := 0 // attempts of other jobs (the fresh one, waiting ones) that started in a free slot
	for _, iv := range ivs {
		switch {
		case !iv.Start.After(first):
		case ranSet[iv.JobID]:
			r.restarted++
		default:
			others++
		}
	}
	if others > 0 {
		b.Logf("%d attempts of jobs that were not running started after the running jobs had", others)
	}
	r.notAdopted = len(tk.pending)
	r.failed = -1 // unknown, unless the new leader answers
	if answer.err == nil {
		notRunning, seen := runningAt(ctx, standby, ranIDs)
		if notRunning > r.notAdopted {
			r.notAdopted = notRunning
		}
		if notRunning > 0 {
			b.Logf("%d running jobs not RUNNING with every subtask running at the new leader, such as: %s", notRunning, strings.Join(seen, "; "))
		}
		if ov, err := overview(ctx, standby); err == nil {
			r.failed = int(ov.GetFailedJobCount())
		} else {
			b.Logf("the new leader's overview: %v", err)
		}
	}
	if peak, err := peakRSS(standby.PID()); err == nil {
		r.peak = float64(peak)
	}
	if prof.dir != "" {
		// The new leader's log (its first 512 MiB), to read where the
		// time went.
		if err := copyHead(standby.LogPath(), filepath.Join(prof.dir, fmt.Sprintf("recover-%d-leader.log", total)), 512<<20); err != nil {
			b.Logf("copying the new leader's log: %v", err)
		}
		// The store's side: the etcd member's warnings (slow applies,
		// slow fsyncs) and the TaskExecutors' HA-store process.
		for _, p := range append([]*localcluster.Process{c.HAStore()}, c.Etcd()[0].Process) {
			if err := copyHead(p.LogPath(), filepath.Join(prof.dir, fmt.Sprintf("recover-%d-%s.log", total, p.Name)), 64<<20); err != nil {
				b.Logf("copying the log of %s: %v", p.Name, err)
			}
		}
	}
	return r, nil
}

// copyHead copies the first n bytes of file from into file to.
func copyHead(from, to string, n int64) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, n); err != nil && !errors.Is(err, io.EOF) {
		out.Close()
		return err
	}
	return out.Close()
}

// waitStarted waits until the TaskExecutors' attempt logs show one
// attempt of each of the one-task jobs ids running, and returns them.
func waitStarted(ctx context.Context, c *localcluster.ProcessCluster, ids []string) ([]chaos.Interval, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var run []chaos.Interval
	err := waitEvery(ctx, 100*time.Millisecond, func(context.Context) error {
		ivs, err := chaos.Attempts(c.TaskExecutors())
		if err != nil {
			return err
		}
		run = run[:0]
		for _, iv := range ivs {
			if iv.Stop.IsZero() && want[iv.JobID] {
				run = append(run, iv)
			}
		}
		if len(run) != len(ids) {
			return fmt.Errorf("%d of the %d jobs' attempts running", len(run), len(ids))
		}
		return nil
	})
	return run, err
}

// waitQueued waits, for at most a minute, until the leader counts n jobs
// waiting for slots or for a seat in its admission window
// (jobplane_jobs_waiting and jobplane_jobs_queued): a steady leader.
func waitQueued(ctx context.Context, jm *localcluster.JobManagerProcess, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	return waitEvery(ctx, 200*time.Millisecond, func(ctx context.Context) error {
		m, err := scrapeMetrics(ctx, hc, jm.URL())
		if err != nil {
			return err
		}
		// Past the admission window, jobs wait for a seat.
		if got := m.get("jobplane_jobs_waiting") + m.get("jobplane_jobs_queued"); int(got) < n {
			return fmt.Errorf("%v jobs waiting for slots or a seat, want %d", got, n)
		}
		return nil
	})
}

// submitFirst is what submitUntilAck saw.
type submitFirst struct {
	at            time.Time // the acknowledgement
	notLeader     int       // NOT_LEADER answers before it
	lastNotLeader time.Time // the last of them
	timeouts      int       // calls that timed out
	err           error     // ctx's end, with the last failure
}

// submitUntilAck submits a fresh job to jm, one call at a time, each
// within callTimeout, until jm acknowledges it; it pauses 5 ms after a
// call that failed before its timeout (a standby's NOT_LEADER, a refused
// connection).
func submitUntilAck(ctx context.Context, jm *localcluster.JobManagerProcess, id string) submitFirst {
	var f submitFirst
	req := &jobplanev1.SubmitJobRequest{JobId: id, JobGraph: sleepJob(id, 1, 24*time.Hour)}
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := jm.Dispatcher().SubmitJob(cctx, req)
		timedOut := cctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			f.at = time.Now()
			return f
		case ctx.Err() != nil:
			f.err = fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			return f
		case timedOut:
			f.timeouts++
			continue
		}
		if ok, _ := localcluster.NotLeader(err); ok {
			f.notLeader++
			f.lastNotLeader = time.Now()
		}
		if sleep(ctx, 5*time.Millisecond) != nil {
			f.err = fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			return f
		}
	}
}

// runningAt asks jm, 8 calls at a time, for each job and returns how many
// are not RUNNING with every subtask RUNNING (or not answered within two
// minutes in all), and how the first few of those were.
func runningAt(ctx context.Context, jm *localcluster.JobManagerProcess, ids []string) (not int, seen []string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
		ch = make(chan string)
	)
	for range 8 {
		wg.Go(func() {
			for id := range ch {
				status, run, total, err := jobState(ctx, jm, id)
				if err != nil || status != jobplanev1.JobStatus_JOB_STATUS_RUNNING || run < total {
					mu.Lock()
					not++
					if len(seen) < 5 {
						seen = append(seen, fmt.Sprintf("%s %v %d/%d running, err %v", id, status, run, total, err))
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range ids {
		ch <- id
	}
	close(ch)
	wg.Wait()
	return not, seen
}

// overview asks jm for the cluster overview.
func overview(ctx context.Context, jm *localcluster.JobManagerProcess) (*jobplanev1.GetClusterOverviewResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return jm.Dispatcher().GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
}

// peakRSS returns the peak resident set size of process pid, from VmHWM
// in /proc/PID/status.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// fetchDebug writes what the profiler at addr serves at path into file.
func fetchDebug(ctx context.Context, addr, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
