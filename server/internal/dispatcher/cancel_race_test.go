package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/sdk/wire/jobstatus"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/internal/dispatcher"
	"github.com/jobplane/jobplane/server/internal/jobmaster"
)

// endingRunner ends its job with the status the test sends, and then,
// as a JobMaster that reached it would, answers a cancel with it.
type endingRunner struct {
	end   chan jobplanev1.JobStatus
	mu    sync.Mutex
	ended jobplanev1.JobStatus
}

func (r *endingRunner) Start(ctx context.Context, done func(jobmaster.Result, error)) {
	go func() {
		select {
		case st := <-r.end:
			r.mu.Lock()
			r.ended = st
			r.mu.Unlock()
			done(jobmaster.Result{Status: st}, nil)
		case <-ctx.Done():
			done(jobmaster.Result{Status: jobstatus.Suspended}, nil)
		}
	}()
}

func (r *endingRunner) Cancel(context.Context) jobplanev1.JobStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended != 0 {
		return r.ended
	}
	return jobstatus.Cancelling
}

func (r *endingRunner) JobMaster() *jobmaster.JobMaster { return nil }

// gatedStore holds the first job result write of a real store at a gate:
// before the write is sent (before) or after it was applied and before
// its answer returns (after). reached is closed at the gate, and release
// lets the write go on.
type gatedStore struct {
	hastore.Store
	after   bool
	once    sync.Once
	reached chan struct{}
	release chan struct{}
	opened  sync.Once
}

// open lets the held write go on; it may be called more than once.
func (s *gatedStore) open() { s.opened.Do(func() { close(s.release) }) }

func (s *gatedStore) gate(write func() error) error {
	var held bool
	s.once.Do(func() { held = true })
	if !held {
		return write()
	}
	if !s.after {
		close(s.reached)
		<-s.release
		return write()
	}
	err := write()
	close(s.reached)
	<-s.release
	return err
}

func (s *gatedStore) CreateDirtyJobResult(ctx context.Context, f hastore.Fence, r *jobplanev1.JobResult) error {
	return s.gate(func() error { return s.Store.CreateDirtyJobResult(ctx, f, r) })
}

// FinishJob takes the contract's three steps through the gatedStore, so
// that the result's write is the gated CreateDirtyJobResult.
func (s *gatedStore) FinishJob(ctx context.Context, f hastore.Fence, r *jobplanev1.JobResult) error {
	return hastore.FinishJobInSteps(ctx, s, f, r)
}

// gatedFinisher is a gatedStore whose result's write is the real store's
// FinishJob, in one write: the gate holds that write.
type gatedFinisher struct{ *gatedStore }

func (s gatedFinisher) FinishJob(ctx context.Context, f hastore.Fence, r *jobplanev1.JobResult) error {
	return s.gate(func() error { return s.Store.FinishJob(ctx, f, r) })
}

// A cancel and the result of a job whose JobMaster has just ended it are
// ordered by the HA store, whichever comes first, on either path of the
// result's write (three steps, or FinishJob's one): a cancel recorded
// before the result ends the job CANCELED, and is answered without a
// terminal status; one that comes after the result is refused
// (TerminalError with the result's status), or repeated for a CANCELED
// one, once the Dispatcher has the result (it then shows it). A FINISHED
// status is never seen for a job whose cancel was acknowledged.
func TestCancelAndResultOrderedByTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	etcd, sess := openStore(ctx, t)
	graph := &jobplanev1.JobGraph{Vertices: []*jobplanev1.JobVertex{{Id: "v", Invokable: "noop", Parallelism: 1}}}

	for _, tc := range []struct {
		name       string
		oneWrite   bool
		after      bool                 // the cancel comes after the result is written
		ends       jobplanev1.JobStatus // as the JobMaster ended the job
		wantCancel jobplanev1.JobStatus // 0: refused as terminal
		wantResult jobplanev1.JobStatus
	}{
		{"cancel first, FINISHED", false, false, jobstatus.Finished, jobstatus.Cancelling, jobstatus.Canceled},
		{"cancel first, FAILED", false, false, jobstatus.Failed, jobstatus.Cancelling, jobstatus.Canceled},
		{"cancel first, FINISHED, one write", true, false, jobstatus.Finished, jobstatus.Cancelling, jobstatus.Canceled},
		{"result first, FINISHED", false, true, jobstatus.Finished, 0, jobstatus.Finished},
		{"result first, FAILED, one write", true, true, jobstatus.Failed, 0, jobstatus.Failed},
		{"result first, CANCELED", false, true, jobstatus.Canceled, jobstatus.Canceled, jobstatus.Canceled},
	} {
		id := strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
		t.Run(tc.name, func(t *testing.T) {
			gs := &gatedStore{Store: etcd, after: tc.after, reached: make(chan struct{}), release: make(chan struct{})}
			var store hastore.Store = gs
			if tc.oneWrite {
				store = gatedFinisher{gs}
			}
			r := &endingRunner{end: make(chan jobplanev1.JobStatus, 1)}
			d, err := dispatcher.New(dispatcher.Config{
				Store: store, Logger: quietLogger(),
				Jobs: jobsOf(store, func(*hastorev1.ExecutionPlan, bool, *hastore.Leadership, func(*jobplanev1.JobSummary)) (dispatcher.JobRunner, error) {
					return r, nil
				}),
			})
			if err != nil {
				t.Fatal(err)
			}
			l, err := sess.Campaign(ctx, election.JobManager, "")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.Lead(l.Context(), l) }()
			defer func() {
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer rcancel()
				if err := l.Resign(rctx); err != nil {
					t.Error(err)
				}
				select {
				case <-done:
				case <-rctx.Done():
					t.Error("the Dispatcher's term did not end after its resignation")
				}
			}()
			defer gs.open() // before the term ends, even if the test fails early
			var out dispatcher.SubmitOutcome
			for {
				if out, err = d.Submit(ctx, id, graph); !errors.Is(err, dispatcher.ErrNotLeading) {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal("not leading within the deadline")
				case <-time.After(5 * time.Millisecond):
				}
			}
			if err != nil || !out.Created {
				t.Fatalf("Submit = %v, %v", out, err)
			}

			r.end <- tc.ends
			select {
			case <-gs.reached:
			case <-ctx.Done():
				t.Fatal("the job's result was never written")
			}
			if det, _, err := d.Details(ctx, id, "", false, jobmaster.Page{}); err != nil || jobstatus.IsGloballyTerminal(det.GetSummary().GetStatus()) {
				t.Errorf("Details before the result's write answered = %v, %v; want a status that is not globally terminal", det.GetSummary().GetStatus(), err)
			}
			// A cancel that comes after the result, while the result's
			// write is unanswered, is answered once the Dispatcher has the
			// result too: its Details never show the job running after a
			// terminal answer.
			type answer struct {
				st  jobplanev1.JobStatus
				err error
			}
			answered := make(chan answer, 1)
			go func() {
				st, err := d.Cancel(ctx, id)
				answered <- answer{st, err}
			}()
			if tc.after {
				gs.open()
			}
			a := <-answered
			st, cerr := a.st, a.err
			if det, _, err := d.Details(ctx, id, "", false, jobmaster.Page{}); tc.wantCancel == 0 && (err != nil || !jobstatus.IsGloballyTerminal(det.GetSummary().GetStatus())) {
				t.Errorf("Details after Cancel answered terminal = %v, %v; want the terminal status", det.GetSummary().GetStatus(), err)
			}
			var term *dispatcher.TerminalError
			switch {
			case tc.wantCancel == 0:
				if !errors.As(cerr, &term) || term.Status != tc.wantResult {
					t.Errorf("Cancel = %v, %v; want a TerminalError with %v", st, cerr, tc.wantResult)
				}
			case cerr != nil || st != tc.wantCancel:
				t.Errorf("Cancel = %v, %v; want %v", st, cerr, tc.wantCancel)
			}
			gs.open()
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			defer wcancel()
			res, err := d.Result(wctx, id, "", true)
			if err != nil || res.GetStatus() != tc.wantResult {
				t.Errorf("Result = %v, %v; want %v", res.GetStatus(), err, tc.wantResult)
			}
			entry, err := etcd.GetJobResultEntry(ctx, id)
			if err != nil || entry.GetResult().GetStatus() != tc.wantResult {
				t.Errorf("stored result = %v, %v; want %v", entry.GetResult().GetStatus(), err, tc.wantResult)
			}
		})
	}
}
