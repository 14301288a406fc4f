package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/sdk"
)

// The tests in this file put the Client against small DispatcherService
// servers that answer as a cluster may in rare moments (a long quiet
// stream cut, a leader named at an address nobody reaches), which a real
// cluster cannot be made to do on cue.

// scripted is a DispatcherService whose answers a test scripts; n counts
// the calls, from 1.
type scripted struct {
	jobplanev1connect.UnimplementedDispatcherServiceHandler
	watch          func(n int, s *connect.ServerStream[jobplanev1.WatchJobResponse]) error
	result         func(n int) (*jobplanev1.GetJobResultResponse, error)
	hb             func(n int) (*jobplanev1.ReportClientHeartbeatResponse, error)
	overview       func(n int) (*jobplanev1.GetClusterOverviewResponse, error)
	nw, nr, nh, no atomic.Int32
}

func (f *scripted) WatchJob(_ context.Context, _ *jobplanev1.WatchJobRequest, s *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
	return f.watch(int(f.nw.Add(1)), s)
}

func (f *scripted) GetJobResult(context.Context, *jobplanev1.GetJobResultRequest) (*jobplanev1.GetJobResultResponse, error) {
	return f.result(int(f.nr.Add(1)))
}

func (f *scripted) ReportClientHeartbeat(context.Context, *jobplanev1.ReportClientHeartbeatRequest) (*jobplanev1.ReportClientHeartbeatResponse, error) {
	if f.hb == nil {
		return &jobplanev1.ReportClientHeartbeatResponse{}, nil
	}
	return f.hb(int(f.nh.Add(1)))
}

func (f *scripted) GetClusterOverview(context.Context, *jobplanev1.GetClusterOverviewRequest) (*jobplanev1.GetClusterOverviewResponse, error) {
	return f.overview(int(f.no.Add(1)))
}

// serveScripted serves f over HTTP/1.1 and h2c on loopback.
func serveScripted(t *testing.T, f *scripted) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(jobplanev1connect.NewDispatcherServiceHandler(f))
	s := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &p
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

func watchMsg(st jobplanev1.JobStatus) *jobplanev1.WatchJobResponse {
	return &jobplanev1.WatchJobResponse{Event: &jobplanev1.WatchJobResponse_Job{Job: &jobplanev1.JobSummary{JobId: "j", Status: st}}, ResumeToken: st.String()}
}

func notLeaderAt(addr string) error {
	e := connect.NewError(connect.CodeUnavailable, errors.New("not the leader of jobmanager"))
	d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Domain: "jobplane", Reason: "NOT_LEADER", Metadata: map[string]string{"election": "jobmanager", "leader_address": addr}})
	e.AddDetail(d)
	return e
}

var (
	running = jobplanev1.JobStatus_JOB_STATUS_RUNNING
	short   = sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: 300 * time.Millisecond})
)

// The retry budget runs from the first failure, not from the call's
// start: a watch quiet for longer than the budget, then cut, resumes.
func TestWatchRidesOutACutAfterAQuietSpell(t *testing.T) {
	quiet := make(chan struct{})
	f := &scripted{watch: func(n int, s *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
		if n == 1 {
			_ = s.Send(watchMsg(running))
			<-quiet // longer than the budget
			return connect.NewError(connect.CodeUnavailable, errors.New("connection lost"))
		}
		return s.Send(watchMsg(finished))
	}}
	c := newClient(t, []string{serveScripted(t, f)}, short)
	time.AfterFunc(600*time.Millisecond, func() { close(quiet) })
	var got []jobplanev1.JobStatus
	for s, err := range c.Watch(testContext(t, 30*time.Second), "j") {
		if err != nil {
			t.Fatalf("Watch failed after %v: %v", got, err)
		}
		got = append(got, s.GetStatus())
	}
	if len(got) != 2 || got[1] != finished {
		t.Fatalf("Watch yielded %v", got)
	}
}

// A wait longer than the budget that then meets a failover is retried.
func TestWaitRidesOutAFailoverAfterALongWait(t *testing.T) {
	f := &scripted{result: func(n int) (*jobplanev1.GetJobResultResponse, error) {
		if n == 1 {
			time.Sleep(600 * time.Millisecond) // a long-poll, longer than the budget
			return nil, notLeaderAt("")
		}
		return &jobplanev1.GetJobResultResponse{Result: &jobplanev1.JobResult{JobId: "j", Status: finished}}, nil
	}}
	c := newClient(t, []string{serveScripted(t, f)}, short)
	if res, err := c.Wait(testContext(t, 30*time.Second), "j"); err != nil || res.GetStatus() != finished {
		t.Fatalf("Wait = %v, %v (attempts %d)", res, err, f.nr.Load())
	}
}

// A standby names a leader at an address this client cannot reach; the
// client goes on to the next URL it was given, the real leader.
func TestUnreachableNamedLeaderLeadsToTheNextURL(t *testing.T) {
	standby := &scripted{overview: func(int) (*jobplanev1.GetClusterOverviewResponse, error) {
		return nil, notLeaderAt("http://127.0.0.1:1")
	}}
	leader := &scripted{overview: func(int) (*jobplanev1.GetClusterOverviewResponse, error) {
		return &jobplanev1.GetClusterOverviewResponse{}, nil
	}}
	c := newClient(t, []string{serveScripted(t, standby), serveScripted(t, leader)}, sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: 5 * time.Second}))
	if _, err := c.Cluster(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("standby asked %d times, leader %d times: %v", standby.no.Load(), leader.no.Load(), err)
	}
}

// With retries off, each URL is still tried once.
func TestRetriesOffTriesEachURLOnce(t *testing.T) {
	standby := &scripted{overview: func(int) (*jobplanev1.GetClusterOverviewResponse, error) { return nil, notLeaderAt("") }}
	leader := &scripted{overview: func(int) (*jobplanev1.GetClusterOverviewResponse, error) {
		return &jobplanev1.GetClusterOverviewResponse{}, nil
	}}
	c := newClient(t, []string{serveScripted(t, standby), serveScripted(t, leader)}, sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: -1}))
	if _, err := c.Cluster(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("standby %d, leader %d: %v", standby.no.Load(), leader.no.Load(), err)
	}
	c = newClient(t, []string{serveScripted(t, standby)}, sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: -1}))
	before := standby.no.Load()
	if _, err := c.Cluster(testContext(t, 30*time.Second)); !errors.As(err, new(*sdk.NotLeaderError)) || standby.no.Load()-before != 1 {
		t.Fatalf("one standby, retries off: %v after %d calls; want one call and a NotLeaderError", err, standby.no.Load()-before)
	}
}

// Client heartbeats go on after an outage longer than the retry budget,
// while Wait waits.
func TestHeartbeatsResumeAfterAnOutage(t *testing.T) {
	var down atomic.Bool
	var after atomic.Int32
	release := make(chan struct{})
	f := &scripted{
		hb: func(n int) (*jobplanev1.ReportClientHeartbeatResponse, error) {
			if down.Load() {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
			}
			if n > 1 {
				after.Add(1)
			}
			return &jobplanev1.ReportClientHeartbeatResponse{Timeout: durationpb.New(300 * time.Millisecond)}, nil
		},
		result: func(int) (*jobplanev1.GetJobResultResponse, error) {
			<-release
			return &jobplanev1.GetJobResultResponse{Result: &jobplanev1.JobResult{JobId: "j", Status: finished}}, nil
		},
	}
	c := newClient(t, []string{serveScripted(t, f)}, short)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Wait(testContext(t, 30*time.Second), "j")
		waited <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for f.nh.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	down.Store(true)
	time.Sleep(600 * time.Millisecond) // an outage longer than the budget
	down.Store(false)
	for after.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if after.Load() == 0 {
		t.Fatalf("no heartbeat after the outage (%d in all)", f.nh.Load())
	}
}

// A coalesced restart of the stream that repeats the last status is not
// yielded again.
func TestWatchDoesNotRepeatACoalescedSummary(t *testing.T) {
	f := &scripted{watch: func(n int, s *connect.ServerStream[jobplanev1.WatchJobResponse]) error {
		if n == 1 {
			_ = s.Send(watchMsg(running))
			return notLeaderAt("")
		}
		m := watchMsg(running)
		m.Coalesced = true
		_ = s.Send(m)
		return s.Send(watchMsg(finished))
	}}
	c := newClient(t, []string{serveScripted(t, f)})
	var got []jobplanev1.JobStatus
	for s, err := range c.Watch(testContext(t, 30*time.Second), "j") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s.GetStatus())
	}
	if len(got) != 2 || got[0] != running || got[1] != finished || f.nw.Load() != 2 {
		t.Fatalf("Watch yielded %v over %d streams; want RUNNING, FINISHED over 2", got, f.nw.Load())
	}
}

// An https:// server that speaks only HTTP/1.1 (a TLS proxy) is reached
// by the default Client.
func TestHTTPSServerOfHTTP1Only(t *testing.T) {
	leader := &scripted{overview: func(int) (*jobplanev1.GetClusterOverviewResponse, error) {
		return &jobplanev1.GetClusterOverviewResponse{}, nil
	}}
	mux := http.NewServeMux()
	mux.Handle(jobplanev1connect.NewDispatcherServiceHandler(leader))
	s := httptest.NewUnstartedServer(mux)
	s.EnableHTTP2 = false
	s.StartTLS()
	t.Cleanup(s.Close)
	tlsCfg := s.Client().Transport.(*http.Transport).TLSClientConfig
	c := newClient(t, []string{s.URL}, sdk.WithTLSConfig(tlsCfg), sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: -1}))
	if _, err := c.Cluster(testContext(t, 30*time.Second)); err != nil {
		t.Fatalf("the default Client to an HTTP/1.1-only https server: %v", err)
	}
}
