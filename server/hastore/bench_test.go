package hastore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

// benchWriters is the number of concurrent writers in the put benchmarks.
const benchWriters = 64

// BenchmarkPlanPut compares fenced plan puts through the Store with raw
// etcd puts of the same bytes on the same embedded member, in one run, and
// with the least a fenced write can cost: one hand-written transaction with
// a single compare.
func BenchmarkPlanPut(b *testing.B) {
	m, err := hastore.StartMember(context.Background(), hastore.MemberConfig{Dir: b.TempDir(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	store, err := hastore.Open(ctx, hastore.OpenConfig{Endpoints: []string{m.Endpoint()}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	raw := store.Client()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	l, err := sess.Campaign(ctx, hastore.ElectionJobManager, "")
	if err != nil {
		b.Fatal(err)
	}
	data, _ := proto.Marshal(storetest.BenchPlan("j"))
	plans := make([]*jobplanev1.ExecutionPlan, b.N)
	for i := range plans {
		plans[i] = storetest.BenchPlan(fmt.Sprintf("j%d", i))
	}

	b.ResetTimer()
	// The phases alternate in rounds, so that none gains from running
	// first on a smaller database.
	var rawRates, fencedRates []storetest.Rate
	const rounds = 4
	per := max(b.N/rounds, 1)
	for lo := 0; lo < b.N; lo += per {
		cnt := min(per, b.N-lo)
		r, err := storetest.Measure(cnt, benchWriters, func(i int) error {
			_, err := raw.Put(ctx, fmt.Sprintf("/raw/plans/j%d", lo+i), string(data))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		f, err := storetest.Measure(cnt, benchWriters, func(i int) error {
			return store.PutExecutionPlan(ctx, l.Fence(), plans[lo+i])
		})
		if err != nil {
			b.Fatal(err)
		}
		rawRates, fencedRates = append(rawRates, r), append(fencedRates, f)
	}
	leaderKey := hastore.DefaultPrefix + "elections/" + hastore.ElectionJobManager + "/" + l.Token().SessionID
	minimal, err := storetest.Measure(b.N, benchWriters, func(i int) error {
		_, err := raw.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", int64(l.Token().Epoch))).
			Then(clientv3.OpPut(fmt.Sprintf("/raw/txn/j%d", i), string(data))).
			Commit()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	rawRate, fenced := combine(rawRates), combine(fencedRates)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rawRate.PerSecond, "raw-acks/s")
	b.ReportMetric(float64(rawRate.P99.Microseconds())/1000, "raw-p99-ms")
	b.ReportMetric(fenced.PerSecond, "fenced-acks/s")
	b.ReportMetric(float64(fenced.P99.Microseconds())/1000, "fenced-p99-ms")
	b.ReportMetric(fenced.PerSecond/rawRate.PerSecond, "ratio")
	b.ReportMetric(minimal.PerSecond, "raw-txn-acks/s")
}

// combine averages rates of equal op counts (harmonically) and keeps the
// worst p99.
func combine(rates []storetest.Rate) storetest.Rate {
	var inv float64
	var out storetest.Rate
	for _, r := range rates {
		inv += 1 / r.PerSecond
		out.P99 = max(out.P99, r.P99)
	}
	out.PerSecond = float64(len(rates)) / inv
	return out
}
