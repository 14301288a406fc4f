package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/server/localcluster"
)

var (
	chaosCycles   = flag.Int("chaos.cycles", 3, "TestChaos: the number of fault cycles")
	chaosDuration = flag.Duration("chaos.duration", 30*time.Second, "TestChaos: the longest time spent injecting faults (cycles stop at whichever bound comes first)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos: the seed of the faults' and the clients' choices; 0 picks one, which the test logs")
	chaosClients  = flag.Int("chaos.clients", 4, "TestChaos: the number of client goroutines")
)

// Bounds of TestChaos's waits, generous for a loaded 2-core machine.
const (
	// leaderBound: after a fault ends, some jobmanager leads within it.
	leaderBound = 60 * time.Second
	// settleBound: once the faults end, every acknowledged job ends
	// within it.
	settleBound = 2 * time.Minute
	// checkBound bounds the linearizability check.
	checkBound = 2 * time.Minute
)

// TestChaos runs a cluster of real processes (3 etcd members, 2
// jobmanagers, 2 TaskExecutors) while client goroutines submit, resubmit,
// cancel and observe jobs, each call recorded, and a fault loop kills,
// pauses and terminates the leading jobmanager and etcd members, in a
// seeded random order. At the end every acknowledged job must end, the
// history must keep the contract's promises (CheckHistory) and no subtask
// may have run twice at once (CheckAttempts).
//
// -chaos.cycles and -chaos.duration bound it (a few cycles by default;
// `make soak` runs 200 cycles or 20 minutes). On a violation the
// visualization of the history is written under $CHAOS_OUT, or the test's
// temporary directory.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos loop runs real processes for a while")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (reproduce the choices with -chaos.seed=%d)", seed, seed)

	began := time.Now()
	c := localcluster.NewProcessCluster(t, localcluster.ProcessClusterConfig{EtcdMembers: 3, JobManagers: 2, TaskExecutors: 2, Slots: 8})
	t.Logf("cluster up in %v", time.Since(began).Round(time.Millisecond))
	ttl := c.SessionTTL()
	rec := NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	w := &workload{c: c, rec: rec, jobs: make(map[string]*jobRecord)}
	stop := make(chan struct{})
	var (
		clients  sync.WaitGroup
		stopOnce sync.Once
	)
	stopClients := func() {
		stopOnce.Do(func() { close(stop) })
		clients.Wait()
	}
	// A test that ends early stops its clients before it returns.
	defer func() {
		cancel()
		stopClients()
	}()
	for i := range *chaosClients {
		cl, err := w.client()
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		rng := rand.New(rand.NewPCG(seed, uint64(i+1)))
		clients.Go(func() { w.run(ctx, stop, cl, i, rng) })
	}

	f := &faults{c: c, rec: rec, ttl: ttl, rng: rand.New(rand.NewPCG(seed, 0)), t: t}
	began = time.Now()
	deadline := began.Add(*chaosDuration)
	cycles := 0
	for cycles < *chaosCycles && time.Now().Before(deadline) {
		if err := f.cycle(ctx, cycles); err != nil {
			t.Errorf("cycle %d: %v", cycles, err)
			break
		}
		cycles++
	}
	stopClients()
	t.Logf("%d fault cycles in %v: %s", cycles, time.Since(began).Round(time.Millisecond), f.summary())

	began = time.Now()
	w.settle(ctx, t)
	t.Logf("every job settled in %v", time.Since(began).Round(time.Millisecond))

	ops := rec.Operations()
	t.Logf("%d operations recorded about %d jobs: %s", len(ops), len(w.jobs), outcomes(ops))
	if w.acked() == 0 {
		t.Errorf("no submission was acknowledged: the loop checked nothing")
	}
	out := os.Getenv("CHAOS_OUT")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(out, fmt.Sprintf("chaos-%d.html", seed))
	began = time.Now()
	err := CheckHistory(ops, checkBound, html, rec.Faults()...)
	t.Logf("history checked in %v", time.Since(began).Round(time.Millisecond))
	switch {
	case errors.Is(err, ErrUndecided):
		t.Logf("the history was not checked: %v", err)
	case err != nil:
		t.Errorf("seed %d: %v", seed, err)
		dump := filepath.Join(out, fmt.Sprintf("chaos-%d.txt", seed))
		if werr := writeHistory(dump, ops, rec); werr != nil {
			t.Logf("writing the history: %v", werr)
		} else {
			t.Logf("the whole history and its faults: %s", dump)
		}
	}

	attempts, err := Attempts(c.TaskExecutors())
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) == 0 {
		t.Errorf("the TaskExecutors ran no attempt: the attempt check checked nothing")
	}
	if err := CheckAttempts(attempts); err != nil {
		t.Errorf("seed %d: %v", seed, err)
	}
	t.Logf("%d execution attempts checked", len(attempts))
}

// writeHistory writes every operation of ops, in call order, and the
// recorder's faults to path, one a line.
func writeHistory(path string, ops []porcupine.Operation, rec *Recorder) error {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var b strings.Builder
	for _, f := range rec.Faults() {
		fmt.Fprintf(&b, "fault %v..%v %s\n", time.Duration(f.Start), time.Duration(f.End), f.Description)
	}
	for _, op := range sorted {
		fmt.Fprintln(&b, FormatOperation(op))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// outcomes counts the operations by kind and outcome, for the log.
func outcomes(ops []porcupine.Operation) string {
	n := make(map[string]int)
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		n[in.Op.String()+" "+out.Outcome.String()]++
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// jobRecord is what the workload knows of one job id.
type jobRecord struct {
	// acked: a submission of it was answered OK.
	acked bool
}

// workload is the clients' side of TestChaos.
type workload struct {
	c   *localcluster.ProcessCluster
	rec *Recorder

	mu   sync.Mutex
	jobs map[string]*jobRecord
}

// client returns an SDK client of every jobmanager that records its
// calls; an attempt gets 2s, so that a paused leader costs little.
func (w *workload) client() (*sdk.Client, error) {
	return w.c.Client(sdk.WithInterceptors(w.rec.Interceptor()), sdk.WithCallTimeout(2*time.Second))
}

func (w *workload) note(id string, acked bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.jobs[id]
	if j == nil {
		j = &jobRecord{}
		w.jobs[id] = j
	}
	j.acked = j.acked || acked
}

func (w *workload) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, j := range w.jobs {
		if j.acked {
			n++
		}
	}
	return n
}

// run is one client: until stop, it submits a job (sometimes twice, as
// a client retrying on its own), sometimes cancels it, observes it, and
// waits a while for its end. Every call goes through the recorder.
func (w *workload) run(ctx context.Context, stop <-chan struct{}, cl *sdk.Client, client int, rng *rand.Rand) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("c%d-%d", client, n)
		d := time.Duration(20+rng.IntN(300)) * time.Millisecond
		long := rng.IntN(4) == 0
		if long {
			d = time.Duration(2000+rng.IntN(3000)) * time.Millisecond
		}
		g := sleeping(id, int32(1+rng.IntN(2)), d)
		submit := func() error {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err := cl.Submit(sctx, g, sdk.WithJobID(id))
			w.note(id, err == nil)
			return err
		}
		err := submit()
		if err != nil || rng.IntN(4) == 0 {
			_ = submit()
		}
		if long || rng.IntN(5) == 0 {
			pause(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = cl.Cancel(cctx, id)
			cancel()
		}
		if rng.IntN(2) == 0 {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = cl.Get(gctx, id, sdk.WithSummaryView())
			cancel()
		}
		if rng.IntN(3) == 0 {
			// GetJobResult without wait, at the client's leader, once.
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _ = cl.Dispatcher(cl.Leader()).GetJobResult(gctx, &jobplanev1.GetJobResultRequest{JobId: id})
			cancel()
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = cl.Wait(wctx, id)
		cancel()
	}
}

// pause waits for d or until ctx ends: the pace of the workload and the
// length of a fault, not a wait for a state.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// settle waits until every acknowledged job has ended, and reads the
// end of every job whose submission's outcome stayed unknown; it fails
// the test for an acknowledged job that does not end within
// settleBound.
func (w *workload) settle(ctx context.Context, t *testing.T) {
	cl, err := w.client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, settleBound)
	defer cancel()
	w.mu.Lock()
	ids := make([]string, 0, len(w.jobs))
	acked := make(map[string]bool)
	for id, j := range w.jobs {
		ids = append(ids, id)
		acked[id] = j.acked
	}
	w.mu.Unlock()
	sort.Strings(ids)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		unsettled []string
	)
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if !acked[id] {
				if _, err := cl.Get(ctx, id, sdk.WithSummaryView()); errors.Is(err, sdk.ErrJobNotFound) {
					return
				}
			}
			if _, err := cl.Wait(ctx, id); err != nil {
				mu.Lock()
				unsettled = append(unsettled, fmt.Sprintf("%s (acknowledged %t): %v", id, acked[id], err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(unsettled)
	for _, u := range unsettled {
		t.Errorf("job %s did not end within %v of the last fault", u, settleBound)
	}
}

// faults is the fault side of TestChaos.
type faults struct {
	c   *localcluster.ProcessCluster
	rec *Recorder
	ttl time.Duration
	rng *rand.Rand
	t   *testing.T

	counts map[string]int
}

func (f *faults) summary() string {
	var parts []string
	for k, v := range f.counts {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// fault is one kind of fault: it runs it to its end, restarts what it
// killed, and returns an error only when the harness could not do so.
type fault struct {
	name   string
	weight int
	run    func(ctx context.Context, f *faults) error
}

var faultKinds = []fault{
	{"SIGKILL leader", 3, func(ctx context.Context, f *faults) error { return f.leader(ctx, syscall.SIGKILL) }},
	{"SIGTERM leader", 2, func(ctx context.Context, f *faults) error { return f.leader(ctx, syscall.SIGTERM) }},
	{"SIGSTOP leader", 2, func(ctx context.Context, f *faults) error { return f.leader(ctx, syscall.SIGSTOP) }},
	{"SIGKILL etcd member", 2, func(ctx context.Context, f *faults) error { return f.etcd(ctx, syscall.SIGKILL, 1) }},
	{"SIGSTOP etcd member", 2, func(ctx context.Context, f *faults) error { return f.etcd(ctx, syscall.SIGSTOP, 1) }},
	{"SIGSTOP two etcd members (no quorum)", 1, func(ctx context.Context, f *faults) error { return f.etcd(ctx, syscall.SIGSTOP, 2) }},
}

// cycle runs one fault chosen at random, waits until a jobmanager leads
// again, and lets the clients work for a while.
func (f *faults) cycle(ctx context.Context, n int) error {
	total := 0
	for _, k := range faultKinds {
		total += k.weight
	}
	pick := f.rng.IntN(total)
	var k fault
	for _, k = range faultKinds {
		if pick < k.weight {
			break
		}
		pick -= k.weight
	}
	if f.counts == nil {
		f.counts = make(map[string]int)
	}
	f.counts[k.name]++
	start := time.Now()
	if err := k.run(ctx, f); err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	lctx, cancel := context.WithTimeout(ctx, leaderBound)
	defer cancel()
	l, err := f.c.WaitLeader(lctx)
	if err != nil {
		return fmt.Errorf("after %s: no leader within %v: %w", k.name, leaderBound, err)
	}
	f.t.Logf("cycle %d: %s, then %s leads, in %v", n, k.name, l.Name, time.Since(start).Round(time.Millisecond))
	pause(ctx, time.Duration(200+f.rng.IntN(800))*time.Millisecond)
	return nil
}

// leader sends sig to the leading jobmanager. SIGKILL and SIGTERM: it
// waits for the process to exit (SIGKILL after 10s of SIGTERM), for a
// standby to lead, and restarts it. SIGSTOP: it keeps it stopped for
// between half the session TTL and twice it (long enough for a standby
// to take over, or not), then sends SIGCONT.
func (f *faults) leader(ctx context.Context, sig syscall.Signal) error {
	lctx, cancel := context.WithTimeout(ctx, leaderBound)
	defer cancel()
	l, err := f.c.WaitLeader(lctx)
	if err != nil {
		return fmt.Errorf("no leader to signal: %w", err)
	}
	end := f.rec.Fault(fmt.Sprintf("%s %s", sigName(sig), l.Name))
	defer end()
	if err := l.Signal(sig); err != nil {
		return err
	}
	if sig == syscall.SIGSTOP {
		pause(ctx, f.ttl/2+time.Duration(f.rng.Int64N(int64(f.ttl)*3/2)))
		return l.Signal(syscall.SIGCONT)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := l.Wait(wctx); err != nil {
		l.Kill()
	}
	if _, err := f.c.WaitLeader(lctx, l); err != nil {
		return fmt.Errorf("no standby led after %s of %s: %w", sigName(sig), l.Name, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, leaderBound)
	defer rcancel()
	return l.Restart(rctx)
}

// etcd sends sig to n etcd members chosen at random. SIGKILL: it
// restarts each after a pause of up to 2s. SIGSTOP: it sends SIGCONT
// after up to 3s (n == 1) or up to 1.5 session TTLs (n == 2, the
// cluster without quorum).
func (f *faults) etcd(ctx context.Context, sig syscall.Signal, n int) error {
	members := f.rng.Perm(len(f.c.Etcd()))[:n]
	var names []string
	for _, i := range members {
		names = append(names, f.c.Etcd()[i].Name)
	}
	end := f.rec.Fault(fmt.Sprintf("%s %s", sigName(sig), strings.Join(names, " ")))
	defer end()
	for _, i := range members {
		if err := f.c.Etcd()[i].Signal(sig); err != nil {
			return err
		}
	}
	down := time.Duration(f.rng.Int64N(int64(2 * time.Second)))
	if sig == syscall.SIGSTOP {
		down = time.Duration(f.rng.Int64N(int64(3 * time.Second)))
		if n > 1 {
			down = time.Duration(f.rng.Int64N(int64(f.ttl) * 3 / 2))
		}
	}
	pause(ctx, down)
	for _, i := range members {
		m := f.c.Etcd()[i]
		if sig == syscall.SIGSTOP {
			if err := m.Signal(syscall.SIGCONT); err != nil {
				return err
			}
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.Wait(wctx)
		cancel()
		if err != nil {
			return err
		}
		rctx, rcancel := context.WithTimeout(ctx, leaderBound)
		err = m.Restart(rctx)
		rcancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// sigName names the signals the faults send.
func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return sig.String()
}

// sleeping returns a one-vertex JobGraph named name whose parallelism
// subtasks run the built-in sleep invokable for d each.
func sleeping(name string, parallelism int32, d time.Duration) *jobplanev1.JobGraph {
	return &jobplanev1.JobGraph{Name: name, Vertices: []*jobplanev1.JobVertex{{
		Id: "sleep", Name: "sleep", Invokable: "sleep", Parallelism: parallelism,
		Config: map[string]string{"duration": d.String()},
	}}}
}
