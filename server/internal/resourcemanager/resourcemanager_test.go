package resourcemanager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/gen/jobplane/cluster/v1/clusterv1connect"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// fakeTaskExecutor allocates every slot but index 1, which is taken, and
// counts the calls; without batch it lacks RequestSlots, as a
// TaskExecutor of another implementation may.
type fakeTaskExecutor struct {
	clusterv1connect.UnimplementedTaskExecutorServiceHandler
	batch bool

	mu    sync.Mutex
	calls map[string]int
}

func occupied(index int32) error {
	if index == 1 {
		return apierror.New(jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED, "taken", nil)
	}
	return nil
}

func (f *fakeTaskExecutor) RequestSlot(_ context.Context, req *clusterv1.RequestSlotRequest) (*clusterv1.RequestSlotResponse, error) {
	f.mu.Lock()
	f.calls["RequestSlot"]++
	f.mu.Unlock()
	if err := occupied(req.GetSlotIndex()); err != nil {
		return nil, err
	}
	return &clusterv1.RequestSlotResponse{SlotReportVersion: 7}, nil
}

func (f *fakeTaskExecutor) RequestSlots(_ context.Context, req *clusterv1.RequestSlotsRequest) (*clusterv1.RequestSlotsResponse, error) {
	if !f.batch {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	f.mu.Lock()
	f.calls["RequestSlots"]++
	f.mu.Unlock()
	resp := &clusterv1.RequestSlotsResponse{SlotReportVersion: 7}
	for i, s := range req.GetSlots() {
		if err := occupied(s.GetSlotIndex()); err != nil {
			resp.Refused = append(resp.Refused, apierror.Item(i, err))
		}
	}
	return resp, nil
}

// The slots allocated on a TaskExecutor go to it in one RequestSlots, or
// one RequestSlot each if it lacks that, with the same outcome per slot.
func TestRequestSlotsBatchesAndFallsBack(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			t.Parallel()
			fake := &fakeTaskExecutor{batch: batch, calls: map[string]int{}}
			mux := http.NewServeMux()
			mux.Handle(clusterv1connect.NewTaskExecutorServiceHandler(fake))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			e := &executor{id: "te", client: clusterv1connect.NewTaskExecutorServiceClient(srv.Client(), srv.URL)}
			var slots []*clusterv1.SlotRequest
			for i := range 4 {
				slots = append(slots, &clusterv1.SlotRequest{SlotIndex: int32(i), AllocationId: fmt.Sprint("a", i), JobId: "j"})
			}
			for round := range 2 {
				errs, versions := requestSlots(context.Background(), e, &jobplanev1.FencingToken{Epoch: 1}, slots)
				for i := range slots {
					if want := i == 1; (errs[i] != nil) != want || want && !apierror.Is(errs[i], jobplanev1.ErrorReason_ERROR_REASON_SLOT_OCCUPIED) {
						t.Errorf("round %d: slot %d: %v, want refused: %v (SLOT_OCCUPIED)", round, i, errs[i], want)
					}
					if errs[i] == nil && versions[i] != 7 {
						t.Errorf("round %d: slot %d: version %d, want 7", round, i, versions[i])
					}
				}
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			want := map[string]int{"RequestSlots": 2}
			if !batch {
				want = map[string]int{"RequestSlot": 8}
			}
			if fmt.Sprint(fake.calls) != fmt.Sprint(want) {
				t.Errorf("calls %v, want %v", fake.calls, want)
			}
		})
	}
}
