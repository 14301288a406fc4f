package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Bounds of row 10.
const (
	// waitingSettleBound bounds the wait for the JobManager to go quiet
	// after a batch of submissions, before its heap is read.
	waitingSettleBound = 10 * time.Second
	// waitingDebugTimeout bounds a read of the JobManager's heap profile
	// (a forced GC of a large heap, then the profile).
	waitingDebugTimeout = 30 * time.Second
)

// Targets of issue 33, target 4 (DESIGN.md §6: a waiting job holds a few
// bytes, 100,000 waiting jobs under 300 MiB).
const (
	targetHeapPerJob = "≤ 2 KiB"
	targetWaitingRSS = "≤ 300 MiB at 100,000 jobs"
)

// waitingMemoryLimit is the Go runtime's soft memory limit (GOMEMLIMIT)
// of row 10's second pass: at the default GOGC=100 the heap grows to
// twice the live heap before a collection, and the limit makes the
// collector run before that, at some CPU. 240 MiB leaves room under the
// target for what the RSS holds beside the Go runtime's memory (the
// embedded member's mapped database file).
const waitingMemoryLimit = "240MiB"

// runWaitingHeap measures row 10 (issue 33, target 4): what a waiting job
// costs the JobManager's memory. Each run starts a JobManager with its
// profiler on (--debug-listen) and no TaskExecutor, so that every job
// waits for slots; 64 h2c clients submit N one-task jobs (100,000; quick
// 2,000), in two halves. After each half, once the JobManager is quiet,
// the bench reads runtime.MemStats from its heap profile with a forced
// GC (/debug/pprof/heap?gc=1&debug=1), and its RSS. Per waiting job: the
// live heap (HeapAlloc with N waiting less HeapAlloc idle, over N),
// HeapInuse, heap objects and RSS, the same way; and the RSS with all N
// waiting. A second pass does the same with the JobManager's memory
// limit set (GOMEMLIMIT, waitingMemoryLimit), for its RSS and how long
// the submissions took.
func runWaitingHeap(ctx context.Context, e *env) (Outcome, error) {
	n := pick(e, 100_000, 2_000)
	var heap, inuse, objects, rssPer, rss, goal, kept []float64
	var notes []string
	var took time.Duration
	for run := range e.runs() {
		e.progress("10: run %d of %d, %d jobs", run+1, e.runs(), n)
		w, err := waitingRun(ctx, e, n, nil)
		if err != nil {
			return Outcome{}, err
		}
		per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
		heap = append(heap, per(w.idle.HeapAlloc, w.full.HeapAlloc)/1024)
		inuse = append(inuse, per(w.idle.HeapInuse, w.full.HeapInuse)/1024)
		objects = append(objects, per(w.idle.HeapObjects, w.full.HeapObjects))
		rssPer = append(rssPer, per(uint64(w.idleRSS), uint64(w.fullRSS))/1024)
		rss = append(rss, float64(w.fullRSS)/(1<<20))
		goal = append(goal, float64(w.full.NextGC)/(1<<20))
		kept = append(kept, float64(w.full.HeapInuse+w.full.HeapIdle-w.full.HeapReleased)/(1<<20))
		// The second half alone: whether the cost per job stays as the
		// first half's, or fixed costs weigh in the figure.
		second := (float64(w.full.HeapAlloc) - float64(w.half.HeapAlloc)) / float64(n-n/2) / 1024
		note := fmt.Sprintf("run %d: %d acknowledged in %v, %d waiting (overview), second half alone %.2f KiB/job, idle JM heap %.1f MiB, RSS %.0f MiB, peak RSS %.0f MiB",
			run+1, w.load.Acks, w.load.Duration.Round(time.Second), w.waiting, second, float64(w.idle.HeapAlloc)/(1<<20), float64(w.idleRSS)/(1<<20), float64(w.peakRSS)/(1<<20))
		if w.stopped {
			note += ", stopped early: JobManager RSS over 8 GiB"
		}
		if errs := countErrors([]Load{w.load}); errs != "" {
			note += ", " + errs
		}
		if w.busy >= 0.1 {
			note += fmt.Sprintf(", the JobManager still used %.2f cores %v after the submissions", w.busy, waitingSettleBound)
		}
		notes = append(notes, note)
		took += w.load.Duration
	}
	var limited []float64
	var limitedNotes []string
	var limitedTook time.Duration
	for run := range e.runs() {
		e.progress("10: run %d of %d with GOMEMLIMIT=%s, %d jobs", run+1, e.runs(), waitingMemoryLimit, n)
		w, err := waitingRun(ctx, e, n, []string{"GOMEMLIMIT=" + waitingMemoryLimit})
		if err != nil {
			return Outcome{}, err
		}
		limited = append(limited, float64(w.fullRSS)/(1<<20))
		limitedTook += w.load.Duration
		limitedNotes = append(limitedNotes, fmt.Sprintf("run %d: %d acknowledged in %v, live heap %.2f KiB/job, peak RSS %.0f MiB",
			run+1, w.load.Acks, w.load.Duration.Round(time.Second), (float64(w.full.HeapAlloc)-float64(w.idle.HeapAlloc))/float64(n)/1024, float64(w.peakRSS)/(1<<20)))
	}
	name := fmt.Sprintf("%d one-task jobs waiting (no TaskExecutor), 64 h2c clients", n)
	limitedNote := fmt.Sprintf("the JobManager run with GOMEMLIMIT=%s; its submissions took %.2f× as long as without it; ", waitingMemoryLimit, limitedTook.Seconds()/took.Seconds()) +
		strings.Join(limitedNotes, "; ")
	return Outcome{Rows: []Row{
		{ID: "10", Scenario: name, Measure: "live heap KiB per waiting job", Value: SpreadOf(heap), Target: targetHeapPerJob, Note: "after a forced GC: (HeapAlloc with N waiting − HeapAlloc idle) / N"},
		{ID: "10", Scenario: name, Measure: "HeapInuse KiB per waiting job", Value: SpreadOf(inuse)},
		{ID: "10", Scenario: name, Measure: "heap objects per waiting job", Value: SpreadOf(objects)},
		{ID: "10", Scenario: name, Measure: "RSS KiB per waiting job", Value: SpreadOf(rssPer), Note: "(VmRSS with N waiting − VmRSS idle) / N"},
		{ID: "10", Scenario: name, Measure: "JM RSS MiB, all waiting", Value: SpreadOf(rss), Target: targetWaitingRSS, Note: strings.Join(notes, "; ")},
		{ID: "10", Scenario: name, Measure: "heap goal MiB (NextGC), all waiting", Value: SpreadOf(goal), Note: "after the forced GC: twice the live heap at GOGC=100; the runtime keeps about 10% over the goal before it returns pages to the OS"},
		{ID: "10", Scenario: name, Measure: "heap kept from the OS MiB, all waiting", Value: SpreadOf(kept), Note: "HeapInuse + HeapIdle − HeapReleased: the heap's share of the RSS"},
		{ID: "10", Scenario: name, Measure: "JM RSS MiB, all waiting, GOMEMLIMIT=" + waitingMemoryLimit, Value: SpreadOf(limited), Target: targetWaitingRSS, Note: limitedNote},
	}}, nil
}

// waiting is one run of row 10.
type waiting struct {
	idle, half, full MemStats // after a forced GC: idle, with N/2 and N jobs
	idleRSS, fullRSS int64
	peakRSS          int64 // while submitting
	load             Load  // both halves
	waiting          int   // non-terminal jobs the overview counts at the end
	busy             float64
	stopped          bool // by the RSS guard
}

// waitingRun starts a JobManager with its profiler on, env added to its
// environment, and no TaskExecutor, reads its heap idle, submits n jobs in
// two halves, reading its heap after each, and stops it.
func waitingRun(ctx context.Context, e *env, n int, env []string) (waiting, error) {
	var w waiting
	addr, err := freeLoopbackAddr()
	if err != nil {
		return w, err
	}
	// The bench's --debug-listen comes last, so that it wins over one in
	// -jm-arg.
	jm, err := StartJobManagerEnv(ctx, e.JobPlane, e.LogLevel, env, append(slices.Clone(e.JobManagerArgs), "--debug-listen", addr)...)
	if err != nil {
		return w, err
	}
	defer jm.Stop()
	if err := jm.WaitReady(ctx, 0, 0, clusterReadyTimeout); err != nil {
		return w, err
	}
	d := NewDispatcher(jm.URL, H2C)
	// The clients' connection is open before the idle heap is read: its
	// buffers are no job's.
	if _, err := d.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{}); err != nil {
		return w, err
	}
	debug := &http.Client{Timeout: waitingDebugTimeout}
	heapURL := "http://" + addr + "/debug/pprof/heap?gc=1&debug=1"
	read := func() (MemStats, int64, error) {
		w.busy = settleProcess(ctx, jm.PID(), waitingSettleBound)
		ms, err := fetchMemStats(ctx, debug, heapURL)
		if err != nil {
			return ms, 0, err
		}
		rss, err := RSSBytes(jm.PID())
		return ms, rss, err
	}
	if w.idle, w.idleRSS, err = read(); err != nil {
		return w, err
	}

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var guard sync.WaitGroup
	guard.Go(func() {
		for {
			if rss, err := RSSBytes(jm.PID()); err == nil {
				w.peakRSS = max(w.peakRSS, rss)
				if rss > pileUpRSSLimit {
					w.stopped = true
					cancel()
					return
				}
			}
			if sleep(lctx, 500*time.Millisecond) != nil {
				return
			}
		}
	})
	graph := OneTaskGraph("noop")
	first := SubmitCount(lctx, d, submitClients, 0, n/2, "wait", graph)
	if lctx.Err() == nil {
		w.half, _, err = read()
	}
	second := SubmitCount(lctx, d, submitClients, n/2, n, "wait", graph)
	cancel()
	guard.Wait()
	if ctx.Err() != nil {
		return w, ctx.Err()
	}
	if err != nil {
		return w, err
	}
	w.load = Load{Acks: first.Acks + second.Acks, Errors: first.Errors + second.Errors, FirstErr: first.FirstErr, Duration: first.Duration + second.Duration}
	if w.load.FirstErr == nil {
		w.load.FirstErr = second.FirstErr
	}
	if err := usable(w.load); err != nil {
		return w, err
	}
	if w.full, w.fullRSS, err = read(); err != nil {
		return w, err
	}
	if dir := os.Getenv("BENCH_HEAP_PROFILE"); dir != "" {
		if err := saveHeapProfile(ctx, debug, "http://"+addr+"/debug/pprof/heap?gc=1", dir); err != nil {
			return w, err
		}
		if err := saveProcMaps(jm.PID(), dir); err != nil {
			return w, err
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, callTimeout)
	defer ccancel()
	ov, err := d.GetClusterOverview(cctx, &jobplanev1.GetClusterOverviewRequest{})
	if err != nil {
		return w, err
	}
	w.waiting = int(ov.GetRunningJobCount())
	return w, nil
}

// freeLoopbackAddr returns a loopback address whose port was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// MemStats are the runtime.MemStats figures row 10 reads, in bytes or
// objects.
type MemStats struct {
	HeapAlloc    uint64
	HeapInuse    uint64
	HeapObjects  uint64
	HeapIdle     uint64
	HeapReleased uint64
	NextGC       uint64
}

// fetchMemStats gets the heap profile at url (debug=1 text) and parses
// the runtime.MemStats at its end.
func fetchMemStats(ctx context.Context, c *http.Client, url string) (MemStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return MemStats{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return MemStats{}, fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return MemStats{}, fmt.Errorf("heap profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return MemStats{}, fmt.Errorf("heap profile: %s", resp.Status)
	}
	return ParseMemStats(string(b))
}

// ParseMemStats reads the runtime.MemStats that a heap profile in text
// form (debug=1) ends with: lines "# Name = value" after
// "# runtime.MemStats". It fails if the block or one of the figures is
// missing.
func ParseMemStats(profile string) (MemStats, error) {
	_, block, ok := strings.Cut(profile, "# runtime.MemStats\n")
	if !ok {
		return MemStats{}, fmt.Errorf("heap profile: no runtime.MemStats")
	}
	values := map[string]uint64{}
	for line := range strings.Lines(block) {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "# "), " = ")
		if !ok {
			continue
		}
		if x, err := strconv.ParseUint(v, 10, 64); err == nil {
			values[k] = x
		}
	}
	var ms MemStats
	for _, f := range []struct {
		name string
		dst  *uint64
	}{{"HeapAlloc", &ms.HeapAlloc}, {"HeapInuse", &ms.HeapInuse}, {"HeapObjects", &ms.HeapObjects}, {"HeapIdle", &ms.HeapIdle}, {"HeapReleased", &ms.HeapReleased}, {"NextGC", &ms.NextGC}} {
		x, ok := values[f.name]
		if !ok {
			return MemStats{}, fmt.Errorf("heap profile: runtime.MemStats without %s", f.name)
		}
		*f.dst = x
	}
	return ms, nil
}

// saveHeapProfile writes the heap profile at url into dir, for
// `go tool pprof`: $BENCH_HEAP_PROFILE names dir, and row 10 saves one
// profile per run with every job waiting.
func saveHeapProfile(ctx context.Context, c *http.Client, url, dir string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "heap-*.pb.gz")
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}

// saveProcMaps copies the process's /proc status and smaps into dir,
// beside its heap profile: which mappings hold the RSS that is not heap.
func saveProcMaps(pid int, dir string) error {
	for _, name := range []string{"status", "smaps"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return err
		}
		f, err := os.CreateTemp(dir, name+"-*.txt")
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
