// Command brokenstore is the reference HA store with one promise of the
// contract broken, for the conformance suite's store mode: every store
// case that checks a promise of contract 1.1, or of 1.2's checkpoints,
// consistency and equality, must fail against some broken store. It embeds an etcd member on --data-dir and serves
// HAStoreService on --listen, through a wrapper that breaks what --break
// names.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

func main() {
	var mode, listen, dataDir string
	flag.StringVar(&mode, "break", "", "the promise to break")
	flag.StringVar(&listen, "listen", "127.0.0.1:0", "the address to serve on")
	flag.StringVar(&dataDir, "data-dir", "", "the embedded member's directory")
	flag.Parse()
	if err := run(mode, listen, dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "brokenstore:", err)
		os.Exit(1)
	}
}

func run(mode, listen, dataDir string) error {
	if _, ok := breaks[mode]; !ok {
		return fmt.Errorf("unknown --break %q", mode)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dataDir, Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	real := hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: store, Logger: log})
	b := &broken{HAStoreServiceHandler: real, mode: mode, campaigned: map[string]bool{}, lastCancel: map[string]*jobplanev1.Cancellation{}, latest: map[string]*hastorev1.GetLatestCheckpointResponse{}, cached: map[string]cachedRead{}}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	// The reference handler also serves on a loopback port of its own, for
	// the streams a break rewrites (their server side cannot be wrapped).
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	innerMux := http.NewServeMux()
	innerMux.Handle(real.Path())
	innerSrv := &http.Server{Handler: innerMux, Protocols: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = innerSrv.Serve(inner) }()
	defer innerSrv.Close()
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	b.inner = hastorev1connect.NewHAStoreServiceClient(&http.Client{Transport: &http.Transport{Protocols: h2c}}, "http://"+inner.Addr().String())
	opts := []connect.HandlerOption{connect.WithInterceptors(b.encodingSensitive(), b.modelBreaks())}
	if mode != "unknown-fields-dropped" {
		opts = append(opts, hastorerpc.HandlerOptions()...)
	}
	mux := http.NewServeMux()
	mux.Handle(hastorev1connect.NewHAStoreServiceHandler(b, opts...))
	srv := &http.Server{Handler: mux, Protocols: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// breaks lists the modes and what each breaks.
var breaks = map[string]string{
	"replace-answers-ok":         "PutExecutionPlan of another plan for a job with one answers OK (and keeps the first)",
	"plan-repeat-refused":        "PutExecutionPlan of the plan a job already has is ALREADY_EXISTS: creates are not idempotent",
	"result-repeat-refused":      "CreateDirtyJobResult of the result a job already has is ALREADY_EXISTS: creates are not idempotent",
	"equality-by-encoding":       "a repeated create in JSON is compared by the request's bytes as sent, not by the canonical encoding, so it is ALREADY_EXISTS",
	"equality-by-proto-equal":    "a plan or result is the same as the stored one by Go's proto.Equal (every NaN the same), not by the canonical encoding",
	"unknown-fields-dropped":     "unknown fields are dropped (binary) or ignored (JSON) instead of refused",
	"non-normalized-accepted":    "a Duration or Timestamp that is not normalized is normalized and stored instead of refused",
	"stale-reads":                "reads are answered from a cache of answers up to 1s old (GetLeader's also as ObserveLeader's first answer), as a lagging replica would",
	"listing-not-a-snapshot":     "ListExecutionPlans reads its first id, then the rest 50ms later: a page mixes two moments",
	"delete-without-result":      "DeleteExecutionPlan of a job without a result entry answers OK",
	"job-token-writes":           "plan and result writes fenced by a job election answer OK",
	"campaign-repeat-refused":    "a Campaign repeated by a session with a candidacy is CANDIDACY_EXISTS",
	"ignore-stale-tokens":        "writes refused as stale answer OK",
	"accept-invalid":             "writes refused as invalid answer OK",
	"leader-without-address":     "GetLeader answers the leader without its published address",
	"resign-noop":                "Resign answers OK and ends nothing",
	"no-expiry":                  "the store renews every session itself, so none expires",
	"cancel-request-lost":        "RequestJobCancel answers OK and records nothing",
	"no-snapshot-end":            "WatchSession never marks the end of its snapshot",
	"checkpoint-any-fence":       "checkpoint and savepoint writes refused for their fence's election (the jobmanager's, another job's; a job's for DeleteSavepoint) answer OK",
	"checkpoint-ids-not-checked": "a checkpoint or savepoint refused for an id not above the job's last answers OK",
	"keep-all-checkpoints":       "AddCheckpoint keeps 100 checkpoints, whatever retain asks",
	"checkpoints-outlive-plan":   "GetLatestCheckpoint answers, for a job the store has no checkpoint of, the last one the store acknowledged for it: DeleteExecutionPlan and FinishJob leave them behind",
	"savepoints-go-with-the-job": "DeleteExecutionPlan also deletes the job's savepoints",
	"clean-before-plan-delete":   "MarkJobResultClean and DeleteJobResultEntry refused while the job's plan exists (EXECUTION_PLAN_NOT_DELETED) answer OK",
	"created-every-put":          "PutExecutionPlan answers created=true to every put it accepts, a repeat of the stored plan too",
	"cancel-record-last-wins":    "GetExecutionPlan tells the last recorded cancel request's record, not the first's: a later request replaces it",
	"cancel-beside-result":       "RequestJobCancel of a job with a FINISHED or FAILED result answers OK, as if a cancel and a result sent at once had both applied",
}

// broken wraps the reference handler.
type broken struct {
	hastorev1connect.HAStoreServiceHandler
	mode  string
	inner hastorev1connect.HAStoreServiceClient // the reference handler, served apart

	mu         sync.Mutex
	campaigned map[string]bool                                   // session/election
	lastCancel map[string]*jobplanev1.Cancellation               // by job, in cancel-record-last-wins
	latest     map[string]*hastorev1.GetLatestCheckpointResponse // by job, in checkpoints-outlive-plan
	cached     map[string]cachedRead                             // by procedure and request, in stale-reads
}

func (b *broken) lie(err error) error {
	switch {
	case b.mode == "ignore-stale-tokens" && hastorerpcReason(err) == "STALE_FENCING_TOKEN",
		b.mode == "accept-invalid" && connect.CodeOf(err) == connect.CodeInvalidArgument:
		return nil
	}
	return err
}

func (b *broken) OpenSession(ctx context.Context, req *hastorev1.OpenSessionRequest) (*hastorev1.OpenSessionResponse, error) {
	resp, err := b.HAStoreServiceHandler.OpenSession(ctx, req)
	if err == nil && b.mode == "no-expiry" {
		go func() {
			for {
				time.Sleep(200 * time.Millisecond)
				_, err := b.KeepAlive(context.Background(), &hastorev1.KeepAliveRequest{SessionId: resp.GetSessionId()})
				if connect.CodeOf(err) == connect.CodeNotFound {
					return // closed
				}
			}
		}()
	}
	return resp, err
}

func (b *broken) AddTaskExecutor(ctx context.Context, req *hastorev1.AddTaskExecutorRequest) (*hastorev1.AddTaskExecutorResponse, error) {
	resp, err := b.HAStoreServiceHandler.AddTaskExecutor(ctx, req)
	if err = b.lie(err); err == nil {
		resp = &hastorev1.AddTaskExecutorResponse{}
	}
	return resp, err
}

func (b *broken) RemoveTaskExecutor(ctx context.Context, req *hastorev1.RemoveTaskExecutorRequest) (*hastorev1.RemoveTaskExecutorResponse, error) {
	resp, err := b.HAStoreServiceHandler.RemoveTaskExecutor(ctx, req)
	if err = b.lie(err); err == nil {
		resp = &hastorev1.RemoveTaskExecutorResponse{}
	}
	return resp, err
}

func (b *broken) GetLeader(ctx context.Context, req *hastorev1.GetLeaderRequest) (*hastorev1.GetLeaderResponse, error) {
	resp, err := b.HAStoreServiceHandler.GetLeader(ctx, req)
	if err == nil && b.mode == "leader-without-address" && resp.GetLeader() != nil {
		resp.Leader.Address = ""
	}
	return resp, err
}

func (b *broken) Resign(ctx context.Context, req *hastorev1.ResignRequest) (*hastorev1.ResignResponse, error) {
	if b.mode == "resign-noop" {
		return &hastorev1.ResignResponse{}, nil
	}
	return b.HAStoreServiceHandler.Resign(ctx, req)
}

func jobFenced(f *jobplanev1.Fence) bool {
	return strings.HasPrefix(f.GetElection(), "job/")
}

// exists is the ALREADY_EXISTS error with reason, as the reference sends
// it.
func exists(reason string) error {
	err := connect.NewError(connect.CodeAlreadyExists, errors.New(strings.ToLower(reason)))
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: hastorerpc.ErrorDomain}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

func (b *broken) Campaign(ctx context.Context, req *hastorev1.CampaignRequest) (*hastorev1.CampaignResponse, error) {
	key := req.GetSessionId() + "/" + req.GetElection()
	if b.mode == "campaign-repeat-refused" {
		b.mu.Lock()
		again := b.campaigned[key]
		b.campaigned[key] = true
		b.mu.Unlock()
		if again {
			return nil, exists("CANDIDACY_EXISTS")
		}
	}
	return b.HAStoreServiceHandler.Campaign(ctx, req)
}

func (b *broken) PutExecutionPlan(ctx context.Context, req *hastorev1.PutExecutionPlanRequest) (*hastorev1.PutExecutionPlanResponse, error) {
	if b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.PutExecutionPlanResponse{}, nil
	}
	if b.mode == "plan-repeat-refused" {
		if _, err := b.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: req.GetPlan().GetJobId()}); err == nil {
			return nil, exists("EXECUTION_PLAN_EXISTS")
		}
	}
	if b.mode == "equality-by-proto-equal" {
		if stored, err := b.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: req.GetPlan().GetJobId()}); err == nil && proto.Equal(stored.GetPlan(), req.GetPlan()) {
			return &hastorev1.PutExecutionPlanResponse{}, nil
		}
	}
	resp, err := b.HAStoreServiceHandler.PutExecutionPlan(ctx, req)
	if b.mode == "replace-answers-ok" && hastorerpcReason(err) == "EXECUTION_PLAN_EXISTS" {
		return &hastorev1.PutExecutionPlanResponse{}, nil
	}
	if err = b.lie(err); err == nil && resp == nil {
		resp = &hastorev1.PutExecutionPlanResponse{}
	}
	if err == nil && b.mode == "created-every-put" {
		resp = &hastorev1.PutExecutionPlanResponse{Created: true}
	}
	return resp, err
}

func (b *broken) DeleteExecutionPlan(ctx context.Context, req *hastorev1.DeleteExecutionPlanRequest) (*hastorev1.DeleteExecutionPlanResponse, error) {
	if b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.DeleteExecutionPlanResponse{}, nil
	}
	resp, err := b.HAStoreServiceHandler.DeleteExecutionPlan(ctx, req)
	if b.mode == "delete-without-result" && hastorerpcReason(err) == "JOB_RESULT_NOT_FOUND" {
		return &hastorev1.DeleteExecutionPlanResponse{}, nil
	}
	if b.mode == "savepoints-go-with-the-job" && err == nil {
		sps, lerr := b.ListSavepoints(ctx, &hastorev1.ListSavepointsRequest{JobId: req.GetJobId()})
		for _, sp := range sps.GetSavepoints() {
			if lerr == nil {
				_, lerr = b.DeleteSavepoint(ctx, &hastorev1.DeleteSavepointRequest{Fence: req.GetFence(), SavepointId: sp.GetSavepointId()})
			}
		}
		err = lerr
	}
	if err = b.lie(err); err == nil {
		resp = &hastorev1.DeleteExecutionPlanResponse{}
	}
	return resp, err
}

func (b *broken) CreateDirtyJobResult(ctx context.Context, req *hastorev1.CreateDirtyJobResultRequest) (*hastorev1.CreateDirtyJobResultResponse, error) {
	if b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.CreateDirtyJobResultResponse{}, nil
	}
	if b.mode == "result-repeat-refused" {
		if _, err := b.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: req.GetResult().GetJobId()}); err == nil {
			return nil, exists("JOB_RESULT_EXISTS")
		}
	}
	if b.mode == "equality-by-proto-equal" {
		if stored, err := b.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: req.GetResult().GetJobId()}); err == nil && proto.Equal(stored.GetEntry().GetResult(), req.GetResult()) {
			return &hastorev1.CreateDirtyJobResultResponse{}, nil
		}
	}
	resp, err := b.HAStoreServiceHandler.CreateDirtyJobResult(ctx, req)
	if err = b.lie(err); err == nil {
		resp = &hastorev1.CreateDirtyJobResultResponse{}
	}
	return resp, err
}

func (b *broken) MarkJobResultClean(ctx context.Context, req *hastorev1.MarkJobResultCleanRequest) (*hastorev1.MarkJobResultCleanResponse, error) {
	if b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.MarkJobResultCleanResponse{}, nil
	}
	resp, err := b.HAStoreServiceHandler.MarkJobResultClean(ctx, req)
	if b.mode == "clean-before-plan-delete" && hastorerpcReason(err) == "EXECUTION_PLAN_NOT_DELETED" {
		err = nil
	}
	if err = b.lie(err); err == nil {
		resp = &hastorev1.MarkJobResultCleanResponse{}
	}
	return resp, err
}

func (b *broken) DeleteJobResultEntry(ctx context.Context, req *hastorev1.DeleteJobResultEntryRequest) (*hastorev1.DeleteJobResultEntryResponse, error) {
	if b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.DeleteJobResultEntryResponse{}, nil
	}
	resp, err := b.HAStoreServiceHandler.DeleteJobResultEntry(ctx, req)
	if b.mode == "clean-before-plan-delete" && hastorerpcReason(err) == "EXECUTION_PLAN_NOT_DELETED" {
		err = nil
	}
	if err = b.lie(err); err == nil {
		resp = &hastorev1.DeleteJobResultEntryResponse{}
	}
	return resp, err
}

func (b *broken) RequestJobCancel(ctx context.Context, req *hastorev1.RequestJobCancelRequest) (*hastorev1.RequestJobCancelResponse, error) {
	if b.mode == "cancel-request-lost" || b.mode == "job-token-writes" && jobFenced(req.GetFence()) {
		return &hastorev1.RequestJobCancelResponse{}, nil
	}
	resp, err := b.HAStoreServiceHandler.RequestJobCancel(ctx, req)
	if b.mode == "cancel-beside-result" && hastorerpcReason(err) == "JOB_TERMINAL" {
		err = nil
	}
	if err = b.lie(err); err == nil {
		resp = &hastorev1.RequestJobCancelResponse{}
		if b.mode == "cancel-record-last-wins" && req.GetCancellation() != nil {
			b.mu.Lock()
			b.lastCancel[req.GetJobId()] = req.GetCancellation()
			b.mu.Unlock()
		}
	}
	return resp, err
}

func (b *broken) GetExecutionPlan(ctx context.Context, req *hastorev1.GetExecutionPlanRequest) (*hastorev1.GetExecutionPlanResponse, error) {
	resp, err := b.HAStoreServiceHandler.GetExecutionPlan(ctx, req)
	if err == nil && b.mode == "cancel-record-last-wins" && resp.GetCancelRequested() {
		b.mu.Lock()
		if last := b.lastCancel[req.GetJobId()]; last != nil {
			resp.Cancellation = last
		}
		b.mu.Unlock()
	}
	return resp, err
}

func (b *broken) ConfirmLeadership(ctx context.Context, req *hastorev1.ConfirmLeadershipRequest) (*hastorev1.ConfirmLeadershipResponse, error) {
	resp, err := b.HAStoreServiceHandler.ConfirmLeadership(ctx, req)
	if err = b.lie(err); err == nil {
		resp = &hastorev1.ConfirmLeadershipResponse{}
	}
	return resp, err
}

// checkpointLie is lie, and also answers OK for what the checkpoint
// breaks let through.
func (b *broken) checkpointLie(err error) error {
	switch {
	case b.mode == "checkpoint-any-fence" && violates(err, "fence.election"),
		b.mode == "checkpoint-ids-not-checked" && hastorerpcReason(err) == "CHECKPOINT_ID_NOT_INCREASING":
		return nil
	}
	return b.lie(err)
}

func (b *broken) AddCheckpoint(ctx context.Context, req *hastorev1.AddCheckpointRequest) (*hastorev1.AddCheckpointResponse, error) {
	if b.mode == "keep-all-checkpoints" {
		req.Retain = 100
	}
	resp, err := b.HAStoreServiceHandler.AddCheckpoint(ctx, req)
	if err == nil && b.mode == "checkpoints-outlive-plan" {
		b.mu.Lock()
		b.latest[req.GetCheckpoint().GetJobId()] = &hastorev1.GetLatestCheckpointResponse{Checkpoint: req.GetCheckpoint(), LastCheckpointId: req.GetCheckpoint().GetCheckpointId()}
		b.mu.Unlock()
	}
	if err = b.checkpointLie(err); err == nil && resp == nil {
		resp = &hastorev1.AddCheckpointResponse{}
	}
	return resp, err
}

func (b *broken) GetLatestCheckpoint(ctx context.Context, req *hastorev1.GetLatestCheckpointRequest) (*hastorev1.GetLatestCheckpointResponse, error) {
	resp, err := b.HAStoreServiceHandler.GetLatestCheckpoint(ctx, req)
	if err == nil && b.mode == "checkpoints-outlive-plan" && resp.GetCheckpoint() == nil {
		b.mu.Lock()
		if kept := b.latest[req.GetJobId()]; kept != nil {
			resp = kept
		}
		b.mu.Unlock()
	}
	return resp, err
}

func (b *broken) AddSavepoint(ctx context.Context, req *hastorev1.AddSavepointRequest) (*hastorev1.AddSavepointResponse, error) {
	resp, err := b.HAStoreServiceHandler.AddSavepoint(ctx, req)
	if err = b.checkpointLie(err); err == nil {
		resp = &hastorev1.AddSavepointResponse{}
	}
	return resp, err
}

func (b *broken) DeleteSavepoint(ctx context.Context, req *hastorev1.DeleteSavepointRequest) (*hastorev1.DeleteSavepointResponse, error) {
	resp, err := b.HAStoreServiceHandler.DeleteSavepoint(ctx, req)
	if err = b.checkpointLie(err); err == nil {
		resp = &hastorev1.DeleteSavepointResponse{}
	}
	return resp, err
}

// violates reports whether a handler's error names field in its
// BadRequest.
func violates(err error, field string) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if br, ok := v.(*errdetails.BadRequest); ok {
				for _, fv := range br.GetFieldViolations() {
					if fv.GetField() == field {
						return true
					}
				}
			}
		}
	}
	return false
}

// encodingSensitive, in the equality-by-encoding mode, refuses a create
// sent in JSON for a job that has the entity already, as a store that
// compares encoded bytes would.
func (b *broken) encodingSensitive() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if b.mode != "equality-by-encoding" || !strings.Contains(req.Header().Get("Content-Type"), "json") {
				return next(ctx, req)
			}
			switch m := req.Any().(type) {
			case *hastorev1.PutExecutionPlanRequest:
				if _, err := b.GetExecutionPlan(ctx, &hastorev1.GetExecutionPlanRequest{JobId: m.GetPlan().GetJobId()}); err == nil {
					return nil, exists("EXECUTION_PLAN_EXISTS")
				}
			case *hastorev1.CreateDirtyJobResultRequest:
				if _, err := b.GetJobResultEntry(ctx, &hastorev1.GetJobResultEntryRequest{JobId: m.GetResult().GetJobId()}); err == nil {
					return nil, exists("JOB_RESULT_EXISTS")
				}
			}
			return next(ctx, req)
		}
	}
}

// hastorerpcReason returns the ErrorInfo reason of a handler's error.
func hastorerpcReason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(interface{ GetReason() string }); ok {
				return info.GetReason()
			}
		}
	}
	return ""
}

func (b *broken) WatchSession(ctx context.Context, req *hastorev1.WatchSessionRequest, out *connect.ServerStream[hastorev1.WatchSessionResponse]) error {
	if b.mode != "no-snapshot-end" {
		return b.HAStoreServiceHandler.WatchSession(ctx, req, out)
	}
	in, err := b.inner.WatchSession(ctx, req)
	if err != nil {
		return err
	}
	defer in.Close()
	for in.Receive() {
		if _, end := in.Msg().GetEvent().(*hastorev1.WatchSessionResponse_SnapshotEnd_); end {
			continue
		}
		if err := out.Send(in.Msg()); err != nil {
			return err
		}
	}
	return in.Err()
}
