package etcdstore_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

// benchWriters is the number of concurrent writers in the put
// benchmarks: -writers, 64 unless set.
var benchWriters = 64

func init() {
	flag.IntVar(&benchWriters, "writers", benchWriters, "concurrent writers in the hastore benchmarks")
}

// openBenchStore opens a store on an embedded member of its own, as
// jobplane does (so the store batches to the member's limits); closed
// with b.
func openBenchStore(b *testing.B) *etcdstore.Store {
	b.Helper()
	store, err := etcdstore.Open(context.Background(), etcdstore.OpenConfig{DataDir: b.TempDir(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return store
}

// BenchmarkPlanPut compares fenced plan puts through the Store with raw
// etcd puts of the same bytes on the same embedded member, in one run, and
// with the least a fenced write can cost: one hand-written transaction with
// a single compare.
func BenchmarkPlanPut(b *testing.B) {
	ctx := context.Background()
	store := openBenchStore(b)
	raw := store.Client()
	txns := countTxns(raw)
	_, l := benchGrant(ctx, b, store)
	data, _ := proto.Marshal(storetest.BenchPlan("j"))
	plans := benchPlans(b.N)

	b.ResetTimer()
	// The phases alternate in rounds, so that none gains from running
	// first on a smaller database.
	var rawRates, fencedRates []storetest.Rate
	var fencedTxns int
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
		before, _ := txns.snapshot()
		f, err := storetest.Measure(cnt, benchWriters, func(i int) error {
			return store.PutExecutionPlan(ctx, l.Fence(), plans[lo+i])
		})
		if err != nil {
			b.Fatal(err)
		}
		after, _ := txns.snapshot()
		fencedTxns += len(after) - len(before)
		rawRates, fencedRates = append(rawRates, r), append(fencedRates, f)
	}
	leaderKey := etcdstore.DefaultPrefix + "elections/" + election.JobManager + "/" + l.Token().SessionID
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
	b.ReportMetric(float64(fencedTxns)/float64(b.N), "fenced-txns/write")
	b.ReportMetric(minimal.PerSecond, "raw-txn-acks/s")
}

// BenchmarkJobWrites measures the four fenced writes of jobWrites, from
// benchWriters jobs at a time. An op is one job, all four writes.
func BenchmarkJobWrites(b *testing.B) {
	ctx := context.Background()
	store := openBenchStore(b)
	txns := countTxns(store.Client())
	_, l := benchGrant(ctx, b, store)
	f := l.Fence()
	plans := benchPlans(b.N)
	before, _ := txns.snapshot()

	b.ResetTimer()
	jobs, err := storetest.Measure(b.N, benchWriters, func(i int) error {
		return jobWrites(ctx, store, f, plans[i])
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	after, _ := txns.snapshot()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(jobs.PerSecond, "jobs/s")
	b.ReportMetric(4*jobs.PerSecond, "writes/s")
	b.ReportMetric(float64(jobs.P99.Microseconds())/1000, "job-p99-ms")
	b.ReportMetric(float64(len(after)-len(before))/float64(4*b.N), "txns/write")
}

// BenchmarkJobLife measures a job's whole life in the store, from
// benchWriters jobs at a time: its JobMaster's campaign in the job's
// election, the four writes of BenchmarkJobWrites fenced by the
// Dispatcher's leadership (the only one that covers plans and results),
// and the JobMaster's resignation. An op is one job.
func BenchmarkJobLife(b *testing.B) {
	ctx := context.Background()
	store := openBenchStore(b)
	txns := countTxns(store.Client())
	sess, dispatcher := benchGrant(ctx, b, store)
	plans := benchPlans(b.N)
	before, _ := txns.snapshot()

	b.ResetTimer()
	jobs, err := storetest.Measure(b.N, benchWriters, func(i int) error {
		l, err := sess.Campaign(ctx, election.Job(plans[i].GetJobId()), "")
		if err != nil {
			return err
		}
		if err := jobWrites(ctx, store, dispatcher.Fence(), plans[i]); err != nil {
			return err
		}
		return l.Resign(ctx)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	after, _ := txns.snapshot()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(jobs.PerSecond, "jobs/s")
	b.ReportMetric(float64(jobs.P99.Microseconds())/1000, "job-p99-ms")
	b.ReportMetric(float64(len(after)-len(before))/float64(6*b.N), "txns/write")
}

// benchPlans returns n plans of distinct jobs.
func benchPlans(n int) []*hastorev1.ExecutionPlan {
	plans := make([]*hastorev1.ExecutionPlan, n)
	for i := range plans {
		plans[i] = storetest.BenchPlan(fmt.Sprintf("j%d", i))
	}
	return plans
}

// jobWrites makes the fenced writes of a job's life as the JobManager did
// before it had one write per submission and per end: put the plan,
// create the dirty result, delete the plan, mark the result clean.
func jobWrites(ctx context.Context, store *etcdstore.Store, f hastore.Fence, plan *hastorev1.ExecutionPlan) error {
	id := plan.GetJobId()
	if err := store.PutExecutionPlan(ctx, f, plan); err != nil {
		return err
	}
	res := &jobplanev1.JobResult{JobId: id, Status: jobplanev1.JobStatus_JOB_STATUS_FINISHED}
	if err := store.CreateDirtyJobResult(ctx, f, res); err != nil {
		return err
	}
	if err := store.DeleteExecutionPlan(ctx, f, id); err != nil {
		return err
	}
	return store.MarkJobResultClean(ctx, f, id)
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

// benchStorePlans is the number of plans BenchmarkCampaigns writes
// before it campaigns: -store-plans, none unless set (row 11 of make
// bench holds 110,000).
var benchStorePlans = 0

func init() {
	flag.IntVar(&benchStorePlans, "store-plans", benchStorePlans, "plans written before BenchmarkCampaigns campaigns")
}

// campaignCallers is how many campaigns BenchmarkCampaigns has in flight:
// a taking-over JobManager starts every job that holds slots at once.
const campaignCallers = 1024

// BenchmarkCampaigns measures the least a takeover's adoption costs the
// store: one new session campaigning in b.N jobs' elections, none held,
// campaignCallers at a time, after -store-plans plans were written. An op
// is one job's grant.
func BenchmarkCampaigns(b *testing.B) {
	ctx := context.Background()
	store := openBenchStore(b)
	sess, dispatcher := benchGrant(ctx, b, store)
	if benchStorePlans > 0 {
		plans := benchPlans(benchStorePlans)
		if _, err := storetest.Measure(len(plans), benchWriters, func(i int) error {
			return store.PutExecutionPlan(ctx, dispatcher.Fence(), plans[i])
		}); err != nil {
			b.Fatal(err)
		}
	}
	txns := countTxns(store.Client())
	before, _ := txns.snapshot()

	b.ResetTimer()
	grants, err := storetest.Measure(b.N, min(campaignCallers, b.N), func(i int) error {
		_, err := sess.Campaign(ctx, election.Job(fmt.Sprintf("c%d", i)), "127.0.0.1:1")
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	after, _ := txns.snapshot()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(grants.PerSecond, "grants/s")
	b.ReportMetric(10_000/grants.PerSecond, "s/10k-grants")
	b.ReportMetric(float64(grants.P99.Microseconds())/1000, "grant-p99-ms")
	b.ReportMetric(float64(len(after)-len(before))/float64(b.N), "txns/grant")
}

// benchGrant opens a session on store, closed with b, and returns it
// with its grant of the election jobmanager.
func benchGrant(ctx context.Context, b *testing.B, store *etcdstore.Store) (hastore.Session, *hastore.Leadership) {
	b.Helper()
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close(context.Background()) })
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		b.Fatal(err)
	}
	return sess, l
}
