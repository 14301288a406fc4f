package failover

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jobplane/jobplane/bench"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/internal/chaos"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

// BenchmarkCheckpoints measures what checkpoints cost and what they save
// (issue 30), for `make bench` (row 9), on real processes: one etcd
// member, one jobmanager on it (which runs the JobMasters and the store),
// and TaskExecutors running the built-in `count` invokable. Each
// benchmark iteration runs every run; run it with -benchtime=1x.
//
//   - one-job (9a): one job of 100 subtasks (counting every 10 ms) on 2
//     TaskExecutors x 50 slots, checkpointing every second, over
//     $CHECKPOINT_WINDOW (default 60s): the jobmanager's cores over the
//     window, and side by side, on a cluster of its own, the same job
//     without checkpoints over the same window (the floor); the HA-store
//     writes per completed checkpoint (the jobmanager's
//     jobplane_hastore_write_duration_seconds count over its completed
//     checkpoints); the time from a checkpoint's last acknowledgement to
//     its durable write (jobplane_checkpoint_store_duration_seconds):
//     the p50 interpolated in its bucket, the bucket's bound, the mean.
//   - many-jobs (9b): $CHECKPOINT_JOBS one-subtask jobs (default 1000) on
//     10 TaskExecutors, each checkpointing every 10 s, over
//     $CHECKPOINT_JOBS_WINDOW (default 60s): the jobmanager's cores and
//     its RSS growth over the window, beside the same jobs without
//     checkpoints.
//   - taskexecutor-kill (9c): $CHECKPOINT_KILLS times (default 20), a
//     one-subtask job counting every 10 ms and checkpointing every second
//     on one of 3 TaskExecutors is SIGKILLed at a random phase of its
//     checkpoints, once 2 completed; its subtask runs again elsewhere from
//     a checkpoint. The work lost is the time from that checkpoint's
//     acknowledgement (ack_time) to the SIGKILL; the time the jobmanager
//     takes to notice the loss (the heartbeat timeout) and redeploy is
//     not lost work, and reported apart.
//
// With $CHECKPOINT_PPROF set to a directory, the jobmanager serves its
// profiler (--debug-listen) and a CPU profile of each window with
// checkpoints is written there.
func BenchmarkCheckpoints(b *testing.B) {
	window := envDuration(b, "CHECKPOINT_WINDOW", 60*time.Second)
	jobsWindow := envDuration(b, "CHECKPOINT_JOBS_WINDOW", 60*time.Second)
	jobs := envInt(b, "CHECKPOINT_JOBS", 1000)
	kills := envInt(b, "CHECKPOINT_KILLS", 20)
	profile := os.Getenv("CHECKPOINT_PPROF")
	if _, _, err := localcluster.Binaries(); err != nil {
		b.Fatal(err)
	}

	b.Run("one-job", func(b *testing.B) {
		s := steadyCase{name: "one-job", jobs: 1, parallelism: 100, every: 10 * time.Millisecond, interval: time.Second,
			tes: 2, slots: 50, settle: 3 * time.Second, window: window, profile: profile}
		for range b.N {
			s.run(b)
		}
		s.report(b)
	})
	b.Run("many-jobs", func(b *testing.B) {
		s := steadyCase{name: "many-jobs", jobs: jobs, parallelism: 1, every: time.Second, interval: 10 * time.Second,
			tes: 10, slots: (jobs + 9) / 10, settle: 10 * time.Second, window: jobsWindow, profile: profile}
		for range b.N {
			s.run(b)
		}
		s.report(b)
	})
	b.Run("taskexecutor-kill", func(b *testing.B) {
		var all killRuns
		for range b.N {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*time.Minute+2*time.Minute)
			r, err := measureCheckpointKills(ctx, b, kills, time.Second)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			all.lost, all.fromTrigger, all.redeploy = append(all.lost, r.lost...), append(all.fromTrigger, r.fromTrigger...), append(all.redeploy, r.redeploy...)
			all.own = append(all.own, r.own...)
			all.notLatest += r.notLatest
		}
		lm, lx := summary(all.lost)
		_, tx := summary(all.fromTrigger)
		rm, rx := summary(all.redeploy)
		_, ox := summary(all.own)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(lm), "ckpt-lost-p50-ms")
		b.ReportMetric(ms(lx), "ckpt-lost-max-ms")
		b.ReportMetric(ms(tx), "ckpt-lost-trigger-max-ms")
		b.ReportMetric(ms(rm), "ckpt-redeploy-p50-ms")
		b.ReportMetric(ms(rx), "ckpt-redeploy-max-ms")
		b.ReportMetric(ms(ox), "ckpt-own-max-ms")
		b.ReportMetric(float64(all.notLatest), "ckpt-not-latest")
		b.ReportMetric(float64(len(all.lost)), "ckpt-kills")
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// envInt reads a positive integer from the environment, or returns def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("$%s=%q: want a positive integer", name, v)
	}
	return n
}

// envDuration reads a positive duration from the environment, or returns
// def.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("$%s=%q: want a positive duration", name, v)
	}
	return d
}

// countJob returns a graph of one vertex of parallelism subtasks that
// count every every for longer than any benchmark runs, restarted on
// failure; with interval > 0, it checkpoints that often, keeping
// retained checkpoints.
func countJob(name string, parallelism int32, every, interval time.Duration, retained int32) *jobplanev1.JobGraph {
	g := &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "count", Name: "count", Invokable: "count", Parallelism: parallelism,
		Config: map[string]string{"every": every.String(), "to": "1000000000"},
	}}}
	restarting(g)
	if interval > 0 {
		g.Config.Checkpoints = &jobplanev1.CheckpointConfig{Interval: durationpb.New(interval), Retained: retained}
	}
	return g
}

// steadyCase is a steady state with and without checkpoints (rows 9a and
// 9b), and what its runs measured.
type steadyCase struct {
	name                  string
	jobs                  int
	parallelism           int32
	every, interval       time.Duration
	tes, slots            int
	settle, window        time.Duration
	profile               string // a directory for CPU profiles, or ""
	with, floor           []steadyFigures
	writesPer             []float64
	storeP50, storeBound  []float64 // seconds
	storeMean, tookP50    []float64 // seconds
	completed, failed     []float64
	floorWrites, teWrites []float64
	floorCompleted        []float64
}

// steadyFigures is what one window measured of the jobmanager.
type steadyFigures struct {
	cores     float64
	rssGrowth float64 // MiB
	rssEnd    float64 // MiB
	before    metrics // the jobmanager's metrics at the start and end of the window
	after     metrics
	// storeWrites is the count of fenced writes at the TaskExecutors'
	// HA-store process over the window.
	storeWrites float64
}

// run measures the floor, then the same jobs with checkpoints, each on a
// cluster of its own.
func (s *steadyCase) run(b *testing.B) {
	for _, checkpoints := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), s.window+s.settle+time.Duration(s.jobs)*100*time.Millisecond+3*time.Minute)
		f, err := s.measure(ctx, b, checkpoints)
		cancel()
		if err != nil {
			b.Fatalf("%s, checkpoints %v: %v", s.name, checkpoints, err)
		}
		if !checkpoints {
			s.floor = append(s.floor, f)
			s.floorWrites = append(s.floorWrites, f.after.get(storeWrites)-f.before.get(storeWrites))
			s.floorCompleted = append(s.floorCompleted, checkpointsEnded(f.after, "completed")-checkpointsEnded(f.before, "completed"))
			continue
		}
		s.with = append(s.with, f)
		done := checkpointsEnded(f.after, "completed") - checkpointsEnded(f.before, "completed")
		s.completed = append(s.completed, done)
		s.failed = append(s.failed, checkpointsEnded(f.after, "failed")-checkpointsEnded(f.before, "failed"))
		s.writesPer = append(s.writesPer, (f.after.get(storeWrites)-f.before.get(storeWrites))/done)
		s.teWrites = append(s.teWrites, f.storeWrites)
		h := f.after.histogram(storeDuration, "kind", "checkpoint").since(f.before.histogram(storeDuration, "kind", "checkpoint"))
		p50, bound := h.quantile(0.5)
		s.storeP50, s.storeBound = append(s.storeP50, p50), append(s.storeBound, bound)
		s.storeMean = append(s.storeMean, h.sum/h.count)
		took, _ := f.after.histogram(checkpointDuration, "kind", "checkpoint").since(f.before.histogram(checkpointDuration, "kind", "checkpoint")).quantile(0.5)
		s.tookP50 = append(s.tookP50, took)
	}
}

// The jobmanager's metrics that rows 9a and 9b read.
const (
	storeWrites        = "jobplane_hastore_write_duration_seconds_count"
	storeDuration      = "jobplane_checkpoint_store_duration_seconds"
	checkpointDuration = "jobplane_checkpoint_duration_seconds"
)

// checkpointsEnded is how many checkpoints (not savepoints) ended with
// the outcome ("completed" or "failed") at the jobmanager.
func checkpointsEnded(m metrics, outcome string) float64 {
	return m.get("jobplane_checkpoints_total", "kind", "checkpoint", "outcome", outcome)
}

func (s *steadyCase) report(b *testing.B) {
	median := func(fs []steadyFigures, f func(steadyFigures) float64) float64 {
		var v []float64
		for _, x := range fs {
			v = append(v, f(x))
		}
		return bench.Median(v)
	}
	cores := func(f steadyFigures) float64 { return f.cores }
	growth := func(f steadyFigures) float64 { return f.rssGrowth }
	end := func(f steadyFigures) float64 { return f.rssEnd }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(s.with, cores), "ckpt-cores")
	b.ReportMetric(median(s.floor, cores), "ckpt-floor-cores")
	b.ReportMetric(median(s.with, growth), "ckpt-rss-growth-mib")
	b.ReportMetric(median(s.floor, growth), "ckpt-floor-rss-growth-mib")
	b.ReportMetric(median(s.with, end), "ckpt-rss-mib")
	b.ReportMetric(median(s.floor, end), "ckpt-floor-rss-mib")
	b.ReportMetric(bench.Median(s.writesPer), "ckpt-writes-per-checkpoint")
	b.ReportMetric(bench.Median(s.floorWrites), "ckpt-floor-writes")
	b.ReportMetric(bench.Median(s.teWrites), "ckpt-te-store-writes")
	b.ReportMetric(bench.Median(s.completed), "ckpt-completed")
	b.ReportMetric(bench.Median(s.failed), "ckpt-failed")
	b.ReportMetric(1000*bench.Median(s.storeP50), "ckpt-store-p50-ms")
	b.ReportMetric(1000*bench.Median(s.storeBound), "ckpt-store-p50-bucket-ms")
	b.ReportMetric(1000*bench.Median(s.storeMean), "ckpt-store-mean-ms")
	b.ReportMetric(1000*bench.Median(s.tookP50), "ckpt-took-p50-ms")
	b.ReportMetric(float64(s.jobs), "ckpt-jobs")
	b.ReportMetric(float64(s.jobs*int(s.parallelism)), "ckpt-subtasks")
	b.ReportMetric(s.interval.Seconds(), "ckpt-interval-s")
	b.ReportMetric(s.window.Seconds(), "ckpt-window-s")
}

// measure starts a cluster, runs the case's jobs (with checkpoints or
// without) until they all run, lets them settle, and measures the
// jobmanager over the window.
func (s *steadyCase) measure(ctx context.Context, b *testing.B, checkpoints bool) (steadyFigures, error) {
	var f steadyFigures
	cfg := localcluster.ProcessClusterConfig{EtcdMembers: 1, JobManagers: 1, TaskExecutors: s.tes, Slots: s.slots}
	profile := checkpoints && s.profile != ""
	if profile {
		cfg.JobManagerArgs = []string{"--debug-listen", "127.0.0.1:0"}
	}
	c, err := localcluster.StartProcessCluster(ctx, cfg)
	if err != nil {
		return f, err
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		return f, err
	}
	defer cl.Close()
	interval := time.Duration(0)
	if checkpoints {
		interval = s.interval
	}
	ids := make([]string, s.jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", s.name, i)
	}
	if err := submitAll(ctx, cl, ids, func(id string) *jobplanev1.JobGraph {
		return countJob(id, s.parallelism, s.every, interval, 0)
	}); err != nil {
		return f, err
	}
	jm := c.JobManagers()[0]
	if err := waitRunning(ctx, jm, ids...); err != nil {
		return f, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	// The scenario's input: the same settling time with checkpoints and
	// without, so that both windows start as long after the jobs ran.
	if err := sleep(ctx, s.settle); err != nil {
		return f, err
	}
	if checkpoints {
		m, err := scrapeMetrics(ctx, hc, jm.URL())
		if err != nil {
			return f, err
		}
		if checkpointsEnded(m, "completed") == 0 {
			return f, fmt.Errorf("no checkpoint completed %v after every job ran", s.settle)
		}
	}
	pid := jm.PID()
	var prof sync.WaitGroup
	var profErr error
	if profile {
		addr, err := debugAddr(jm.LogPath())
		if err != nil {
			return f, err
		}
		prof.Go(func() {
			profErr = fetchProfile(ctx, addr, s.window, filepath.Join(s.profile, s.name+".pprof"))
		})
	}
	if f.before, err = scrapeMetrics(ctx, hc, jm.URL()); err != nil {
		return f, err
	}
	teBefore, err := scrapeMetrics(ctx, hc, c.HAStore().URL())
	if err != nil {
		return f, err
	}
	rss0, err := bench.RSSBytes(pid)
	if err != nil {
		return f, err
	}
	meter, err := bench.NewCPUMeter(pid)
	if err != nil {
		return f, err
	}
	if err := sleep(ctx, s.window); err != nil {
		return f, err
	}
	if f.cores, err = meter.Cores(); err != nil {
		return f, err
	}
	rss1, err := bench.RSSBytes(pid)
	if err != nil {
		return f, err
	}
	if f.after, err = scrapeMetrics(ctx, hc, jm.URL()); err != nil {
		return f, err
	}
	teAfter, err := scrapeMetrics(ctx, hc, c.HAStore().URL())
	if err != nil {
		return f, err
	}
	prof.Wait()
	if profErr != nil {
		return f, profErr
	}
	f.storeWrites = teAfter.get(storeWrites) - teBefore.get(storeWrites)
	f.rssGrowth, f.rssEnd = float64(rss1-rss0)/(1<<20), float64(rss1)/(1<<20)
	b.Logf("%s, checkpoints %v: jobmanager %.3f cores, RSS %.1f → %.1f MiB over %v; store writes %v, checkpoints completed %v, failed %v",
		s.name, checkpoints, f.cores, float64(rss0)/(1<<20), f.rssEnd, s.window,
		f.after.get(storeWrites)-f.before.get(storeWrites), checkpointsEnded(f.after, "completed")-checkpointsEnded(f.before, "completed"),
		checkpointsEnded(f.after, "failed")-checkpointsEnded(f.before, "failed"))
	return f, nil
}

// submitAll submits the jobs, 8 at a time.
func submitAll(ctx context.Context, cl *sdk.Client, ids []string, graph func(id string) *jobplanev1.JobGraph) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan string)
	)
	for range 8 {
		wg.Go(func() {
			for id := range next {
				if _, err := cl.Submit(ctx, graph(id), sdk.WithJobID(id)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("submit %s: %w", id, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range ids {
		select {
		case next <- id:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// sleep waits d, the input of a scenario (a window, a phase), or until
// ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var profilerAddr = regexp.MustCompile(`serving the profiler.*?addr"?[=:]"?([0-9a-zA-Z.:\[\]]+)`)

// debugAddr finds the profiler's address in a jobmanager's log.
func debugAddr(log string) (string, error) {
	data, err := os.ReadFile(log)
	if err != nil {
		return "", err
	}
	m := profilerAddr.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("%s: no profiler address", log)
	}
	return string(m[1]), nil
}

// fetchProfile writes a CPU profile of d from the profiler at addr into
// path.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	return fetchDebug(ctx, addr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), path)
}

// killRuns is what measureCheckpointKills measured, one entry per run.
type killRuns struct {
	// lost is from the ack_time of the checkpoint the subtask restored
	// from to the SIGKILL; fromTrigger from its trigger_time (an upper
	// bound of the work lost, as the state was taken between the two).
	lost, fromTrigger []time.Duration
	// redeploy is from the SIGKILL until the new attempt reported what
	// it restored (detection by the heartbeat timeout, restart, deploy).
	redeploy []time.Duration
	// own is the longest time a checkpoint of the run took from its
	// trigger to its last acknowledgement.
	own []time.Duration
	// notLatest counts runs restored from a checkpoint older than the
	// latest completed before the SIGKILL.
	notLatest int
	// log says, for each run, which TaskExecutor was killed at which
	// phase, the checkpoint and count restored, and the work lost.
	log []string
}

// countingFrom is the count invokable's first line of output.
var countingFrom = regexp.MustCompile(`counting from (\d+) to \d+"? restored_from="?([^"\s]*)`)

// measureCheckpointKills runs kills times a one-subtask count job that
// checkpoints every interval on one of three TaskExecutors, and SIGKILLs
// that TaskExecutor at a random phase once two checkpoints completed; it
// measures the work lost, from the checkpoint the next attempt restored.
// The killed TaskExecutor is started again after each run.
func measureCheckpointKills(ctx context.Context, b *testing.B, kills int, interval time.Duration) (killRuns, error) {
	var r killRuns
	c, err := localcluster.StartProcessCluster(ctx, localcluster.ProcessClusterConfig{EtcdMembers: 1, JobManagers: 1, TaskExecutors: 3, Slots: 1})
	if err != nil {
		return r, err
	}
	defer c.Close()
	cl, err := c.Client()
	if err != nil {
		return r, err
	}
	defer cl.Close()
	jm := c.JobManagers()[0]
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	b.Logf("taskexecutor-kill: seed %d", seed)
	for run := range kills {
		if err := killOnce(ctx, b, c, cl, jm, run, rng.Float64(), interval, &r); err != nil {
			return r, fmt.Errorf("run %d (seed %d): %w\n%s", run, seed, err, c.Logs())
		}
	}
	// One line: the benchmark's log keeps only its first lines.
	b.Logf("runs (TaskExecutor@phase→checkpoint/count:lost): %s", strings.Join(r.log, " "))
	ivs, err := chaos.Attempts(c.TaskExecutors())
	if err != nil {
		return r, err
	}
	return r, chaos.CheckAttempts(ivs)
}

// killOnce is one run of measureCheckpointKills: phase, in [0, 1), is
// when in a checkpoint interval the SIGKILL comes.
func killOnce(ctx context.Context, b *testing.B, c *localcluster.ProcessCluster, cl *sdk.Client, jm *localcluster.JobManagerProcess, run int, phase float64, interval time.Duration, r *killRuns) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	id := fmt.Sprintf("kill-%d", run)
	if _, err := cl.Submit(ctx, countJob(id, 1, 10*time.Millisecond, interval, 10), sdk.WithJobID(id)); err != nil {
		return err
	}
	if err := waitRunning(ctx, jm, id); err != nil {
		return err
	}
	// Two checkpoints completed: the subtask has state to lose.
	if err := waitEvery(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		cps, err := checkpoints(ctx, jm, id)
		if err != nil {
			return err
		}
		if n := cps.GetStats().GetCounts().GetCompleted(); n < 2 {
			return fmt.Errorf("%d checkpoints completed, want 2", n)
		}
		return nil
	}); err != nil {
		return err
	}
	te, attempt, err := runningOn(c, id)
	if err != nil {
		return err
	}
	if err := sleep(ctx, time.Duration(phase*float64(interval))); err != nil {
		return err
	}
	before, err := checkpoints(ctx, jm, id)
	if err != nil {
		return err
	}
	killed := time.Now()
	if err := te.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	// The next attempt, elsewhere, says what it restored.
	var from string
	var count int64
	if err := waitEvery(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		next := int32(attempt + 1)
		out, err := jm.Dispatcher().GetTaskOutput(cctx, &jobplanev1.GetTaskOutputRequest{JobId: id, VertexId: "count", AttemptNumber: &next})
		if err != nil {
			return err
		}
		m := countingFrom.FindSubmatch(out.GetData())
		if m == nil {
			return fmt.Errorf("attempt %d said %q", next, out.GetData())
		}
		from = string(m[2])
		count, _ = strconv.ParseInt(string(m[1]), 10, 64)
		return nil
	}); err != nil {
		return err
	}
	redeployed := time.Since(killed)
	after, err := checkpoints(ctx, jm, id)
	if err != nil {
		return err
	}
	var (
		restored *jobplanev1.CheckpointInfo
		own      time.Duration
	)
	for _, cp := range append(before.GetCheckpoints(), after.GetCheckpoints()...) {
		if strconv.FormatUint(cp.GetCheckpointId(), 10) == from {
			restored = cp
		}
		own = max(own, cp.GetAckTime().AsTime().Sub(cp.GetTriggerTime().AsTime()))
	}
	if restored == nil {
		return fmt.Errorf("attempt %d restored from %q (count %d), which is none of the checkpoints %v and %v", attempt+1, from, count, before.GetCheckpoints(), after.GetCheckpoints())
	}
	latest := before.GetStats().GetLatest().GetCheckpointId()
	if restored.GetCheckpointId() < latest {
		r.notLatest++
		b.Logf("run %d: restored checkpoint %d, but %d had completed before the SIGKILL", run, restored.GetCheckpointId(), latest)
	}
	lost := killed.Sub(restored.GetAckTime().AsTime())
	r.lost = append(r.lost, lost)
	r.fromTrigger = append(r.fromTrigger, killed.Sub(restored.GetTriggerTime().AsTime()))
	r.redeploy = append(r.redeploy, redeployed)
	r.own = append(r.own, own)
	r.log = append(r.log, fmt.Sprintf("%s@%.2f→%d/%d:%v", te.Name[len("taskexecutor-"):], phase, restored.GetCheckpointId(), count, lost.Round(time.Millisecond)))

	if _, err := cl.Cancel(ctx, id); err != nil {
		return err
	}
	if err := te.Wait(ctx); err != nil {
		return err
	}
	if err := te.Restart(ctx); err != nil {
		return err
	}
	return c.WaitTaskExecutors(ctx, len(c.TaskExecutors()))
}

// checkpoints asks the jobmanager for the job's checkpoints.
func checkpoints(ctx context.Context, jm *localcluster.JobManagerProcess, jobID string) (*jobplanev1.ListCheckpointsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return jm.Dispatcher().ListCheckpoints(ctx, &jobplanev1.ListCheckpointsRequest{JobId: jobID})
}

// runningOn returns the TaskExecutor process that runs the job's one
// attempt, and the attempt's number, from the attempt logs.
func runningOn(c *localcluster.ProcessCluster, jobID string) (*localcluster.TaskExecutorProcess, int, error) {
	ivs, err := chaos.Attempts(c.TaskExecutors())
	if err != nil {
		return nil, 0, err
	}
	var running []chaos.Interval
	for _, iv := range ivs {
		if iv.JobID == jobID && iv.Stop.IsZero() {
			running = append(running, iv)
		}
	}
	if len(running) != 1 {
		return nil, 0, fmt.Errorf("job %s runs %d attempts, want 1: %v", jobID, len(running), running)
	}
	i := slices.IndexFunc(c.TaskExecutors(), func(te *localcluster.TaskExecutorProcess) bool { return te.Name == running[0].Process })
	if i < 0 {
		return nil, 0, fmt.Errorf("no TaskExecutor process %s", running[0].Process)
	}
	return c.TaskExecutors()[i], running[0].Attempt, nil
}
