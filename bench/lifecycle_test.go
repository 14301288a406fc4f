package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// floorUnderTest is RunFloor in this process, driven over pipes.
type floorUnderTest struct {
	url  string
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

// newFloorUnderTest runs the floor until the test ends.
func newFloorUnderTest(t *testing.T) *floorUnderTest {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f := &floorUnderTest{in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		err := RunFloor(ctx, inR, outW)
		outW.Close()
		f.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		// Whatever the floor still writes is read and dropped, so that it
		// never blocks on its output while stopping.
		go io.Copy(io.Discard, outR)
		if err := <-f.done; err != nil {
			t.Errorf("RunFloor: %v", err)
		}
	})
	url, ok := strings.CutPrefix(f.line(t), "ready ")
	if !ok {
		t.Fatal("the floor did not say ready")
	}
	f.url = url
	return f
}

// line reads the floor's next line, failing the test after 30s.
func (f *floorUnderTest) line(t *testing.T) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, _ := f.out.ReadString('\n')
		ch <- strings.TrimSpace(l)
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("the floor said nothing within 30s")
		return ""
	}
}

// command sends cmd and decodes the answer as LifecycleStats.
func (f *floorUnderTest) command(t *testing.T, cmd string) LifecycleStats {
	t.Helper()
	if _, err := fmt.Fprintln(f.in, cmd); err != nil {
		t.Fatal(err)
	}
	l := f.line(t)
	var st LifecycleStats
	if err := json.Unmarshal([]byte(l), &st); err != nil {
		t.Fatalf("%s: the floor answered %q: %v", cmd, l, err)
	}
	return st
}

func TestLifecycleFloorFinishesEveryJob(t *testing.T) {
	t.Parallel()
	f := newFloorUnderTest(t)
	if st := f.command(t, "drain 0"); st.Error == "" {
		t.Errorf("drain before the lifecycle mode answered %+v, want an error", st)
	}
	te, err := StartStandInTaskExecutor(f.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(te.Stop)
	if st := f.command(t, "lifecycle "+te.URL); st.Error != "" {
		t.Fatalf("lifecycle: %s", st.Error)
	}
	if st := f.command(t, "lifecycle "+te.URL); st.Error == "" {
		t.Error("a second lifecycle command was taken, want an error")
	}
	const jobs = 20
	d := NewDispatcher(f.url, H2C)
	for i := range jobs {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: fmt.Sprintf("life-%d", i), JobGraph: OneTaskGraph("noop")})
		cancel()
		if err != nil {
			t.Fatalf("SubmitJob %d: %v", i, err)
		}
	}
	st := f.command(t, "drain 20")
	want := LifecycleStats{Acked: jobs, Finished: jobs, Drained: true}
	if st != want {
		t.Errorf("drain = %+v, want %+v", st, want)
	}
	if n := te.Failed.Load(); n != 0 {
		t.Errorf("%d stand-in reports failed (%s), want none", n, te.FirstErr())
	}
	// The finish write removed the plan: the same job id submitted again
	// finds its result, which the store refuses the plan of.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := d.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "life-0", JobGraph: OneTaskGraph("noop")}); err == nil {
		t.Error("a finished job's id was taken again, want the store to refuse its plan (its result exists)")
	}
}

func TestLifecycleNote(t *testing.T) {
	t.Parallel()
	te := &StandInTaskExecutor{}
	te.Failed.Store(2)
	msg := "boom"
	te.firstErr.Store(&msg)
	got := lifecycleNote([]float64{10, 30, 20}, nil, []int{7}, time.Second, LifecycleStats{Failed: 1, FirstFailure: "j: FinishJob: x"}, te)
	for _, want := range []string{
		"not finished at a run's end: JobManager 20, floor —",
		"1 floor run(s) began with jobs of the last still pending after 1s ([7])",
		"1 floor jobs failed (j: FinishJob: x)",
		"2 stand-in reports failed (boom)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lifecycleNote = %q, lacks %q", got, want)
		}
	}
	if got := lifecycleNote([]float64{1}, []float64{2}, nil, time.Second, LifecycleStats{}, &StandInTaskExecutor{}); strings.Contains(got, "failed") || strings.Contains(got, "pending") {
		t.Errorf("lifecycleNote of a clean case = %q, want no failures or pending runs", got)
	}
}

func TestCostNoteNamesTheStandIn(t *testing.T) {
	t.Parallel()
	sys, floor := []cpuPerAck{{900, 400}}, []cpuPerAck{{300, 200}}
	if got := costNote(sys, floor, true); !strings.Contains(got, "floor 300 µs + bench 200 µs (clients, stand-in TaskExecutor)") {
		t.Errorf("costNote with the stand-in = %q", got)
	}
	if got := costNote(sys, floor, false); !strings.Contains(got, "floor 300 µs + bench 200 µs (clients)") {
		t.Errorf("costNote without = %q", got)
	}
}
