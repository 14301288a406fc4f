package hastorerpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

// BenchmarkRemotePlanPut compares fenced plan puts through the remote
// Store over h2c with raw etcd puts of the same bytes on the same member.
func BenchmarkRemotePlanPut(b *testing.B) {
	const writers = 64
	srv := &server{dir: b.TempDir(), addr: "127.0.0.1:0"}
	srv.start(b)
	defer srv.stop()
	ctx := context.Background()
	store := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: newHTTPClient(b, h2c), BaseURL: srv.url(), Logger: quietLogger()})
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close(ctx)
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		b.Fatal(err)
	}
	raw := srv.store.Client()
	data, _ := proto.Marshal(storetest.BenchPlan("j"))
	plans := make([]*hastorev1.ExecutionPlan, b.N)
	for i := range plans {
		plans[i] = storetest.BenchPlan(fmt.Sprintf("j%d", i))
	}
	b.ResetTimer()
	rawRate, err := storetest.Measure(b.N, writers, func(i int) error {
		_, err := raw.Put(ctx, fmt.Sprintf("/raw/plans/j%d", i), string(data))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	remote, err := storetest.Measure(b.N, writers, func(i int) error {
		return store.PutExecutionPlan(ctx, l.Fence(), plans[i])
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rawRate.PerSecond, "raw-acks/s")
	b.ReportMetric(float64(rawRate.P99.Microseconds())/1000, "raw-p99-ms")
	b.ReportMetric(remote.PerSecond, "remote-acks/s")
	b.ReportMetric(float64(remote.P99.Microseconds())/1000, "remote-p99-ms")
	b.ReportMetric(remote.PerSecond/rawRate.PerSecond, "ratio")
}
