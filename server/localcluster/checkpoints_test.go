package localcluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/localcluster"
)

// checkpointIDs lists the ids of the job's kept checkpoints at d.
func checkpointIDs(ctx context.Context, d jobplanev1connect.DispatcherServiceClient, id string) ([]uint64, error) {
	resp, err := d.ListCheckpoints(ctx, &jobplanev1.ListCheckpointsRequest{JobId: id})
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, cp := range resp.GetCheckpoints() {
		ids = append(ids, cp.GetCheckpointId())
	}
	return ids, nil
}

// A job's checkpoints and savepoints are the HA store's, not its
// leader's: after a change of leader, the new one lists every checkpoint
// the old one had completed (the job keeps 20) and the savepoint taken
// under the old one. (The dashboard's checkpoints panel reads these
// calls.)
func TestCheckpointHistorySurvivesALeaderChange(t *testing.T) {
	c := start(t, localcluster.Config{JobManagers: 2, Slots: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	jms := c.JobManagers()
	old, next := jms[0].Dispatcher(), jms[1].Dispatcher()
	g := &jobplanev1.JobGraph{
		Name:     "counting",
		Vertices: []*jobplanev1.JobVertex{{Id: "count", Invokable: "count", Parallelism: 2, Config: map[string]string{"to": "1000000", "every": "10ms"}}},
		Config: &jobplanev1.JobConfig{
			Checkpoints: &jobplanev1.CheckpointConfig{Interval: durationpb.New(200 * time.Millisecond), Retained: 20},
		},
	}
	if _, err := old.SubmitJob(ctx, &jobplanev1.SubmitJobRequest{JobId: "counting", JobGraph: g}); err != nil {
		t.Fatal(err)
	}
	var before []uint64
	for len(before) < 2 {
		var err error
		if before, err = checkpointIDs(ctx, old, "counting"); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("fewer than 2 checkpoints completed: %v", before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sp, err := old.TriggerSavepoint(ctx, &jobplanev1.TriggerSavepointRequest{JobId: "counting"})
	if err != nil {
		t.Fatal(err)
	}
	if before, err = checkpointIDs(ctx, old, "counting"); err != nil {
		t.Fatal(err)
	}

	if err := jms[0].Stop(); err != nil {
		t.Fatal(err)
	}
	var after []uint64
	for {
		after, err = checkpointIDs(ctx, next, "counting")
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			t.Fatalf("ListCheckpoints at the new leader: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			t.Errorf("checkpoint %d, completed under the old leader, is not listed by the new one: before %v, after %v", id, before, after)
		}
	}
	sps, err := next.ListSavepoints(ctx, &jobplanev1.ListSavepointsRequest{JobId: "counting"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(sps.GetSavepoints(), func(s *jobplanev1.SavepointInfo) bool {
		return s.GetSavepointId() == sp.GetSavepoint().GetSavepointId()
	}) {
		t.Errorf("savepoint %s, taken under the old leader, is not listed by the new one: %v", sp.GetSavepoint().GetSavepointId(), sps)
	}
}
