package telemetry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/wire/apierror"
)

// meterName is the instrumentation scope of jobplane's own metrics.
const meterName = "github.com/jobplane/jobplane/server"

// latencyBuckets are the boundaries, in seconds, of the latency
// histograms: from 100µs (a fenced etcd write on a fast disk) to 10s.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// instruments are jobplane's metrics on one meter provider.
type instruments struct {
	provider       metric.MeterProvider
	submitted      metric.Int64Counter
	ended          metric.Int64Counter
	submitDuration metric.Float64Histogram
	leaderChanges  metric.Int64Counter
	fencing        metric.Int64Counter
	restarts       metric.Int64Counter
	storeWrite     metric.Float64Histogram
	limits         metric.Int64Counter
	checkpoints    metric.Int64Counter
	checkpointTook metric.Float64Histogram
	checkpointSave metric.Float64Histogram
	jobDuration    metric.Float64Histogram
	registration   metric.Registration
}

// current holds the instruments of the installed provider; nil before
// Setup and after Shutdown, when recording is a no-op.
var current atomic.Pointer[instruments]

// install makes mp the provider of the package's instruments.
func install(mp metric.MeterProvider) error {
	m := mp.Meter(meterName)
	in := &instruments{provider: mp}
	var errs [18]error
	in.submitted, errs[0] = m.Int64Counter("jobplane.jobs.submitted",
		metric.WithDescription("Jobs accepted as created by SubmitJob (repeated submissions of a job not counted)."))
	in.ended, errs[1] = m.Int64Counter("jobplane.jobs.ended",
		metric.WithDescription("Jobs that reached a globally terminal status, by status (FINISHED, FAILED, CANCELED)."))
	in.submitDuration, errs[2] = m.Float64Histogram("jobplane.submission.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the Dispatcher took to answer a SubmitJob that created a job: validation, persist, runner start."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.leaderChanges, errs[3] = m.Int64Counter("jobplane.leader.changes",
		metric.WithDescription("Times this process gained or lost the JobManager leadership, by change (gained, lost)."))
	in.fencing, errs[4] = m.Int64Counter("jobplane.fencing.rejections",
		metric.WithDescription("Calls and store writes refused for a stale fencing token, by the service that refused them."))
	in.restarts, errs[5] = m.Int64Counter("jobplane.job.restarts",
		metric.WithDescription("Restarts of jobs (or their failed regions) that a JobMaster's restart strategy allowed."))
	in.storeWrite, errs[6] = m.Float64Histogram("jobplane.hastore.write.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a fenced HA-store write took, from queuing in the group commit to etcd's answer."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.limits, errs[9] = m.Int64Counter("jobplane.limit.refusals",
		metric.WithDescription("Calls of the public API refused at a limit, by reason (TOO_MANY_STREAMS, SUBMIT_RATE_EXCEEDED, TOO_MANY_JOBS, TOO_MANY_SUBTASKS)."))
	in.checkpoints, errs[10] = m.Int64Counter("jobplane.checkpoints",
		metric.WithDescription("Checkpoints and savepoints that ended, by kind (checkpoint, savepoint) and outcome (completed, failed)."))
	in.checkpointTook, errs[11] = m.Float64Histogram("jobplane.checkpoint.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a completed checkpoint's or savepoint's trigger to its durable store write."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.checkpointSave, errs[12] = m.Float64Histogram("jobplane.checkpoint.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a completed checkpoint's or savepoint's last acknowledgement to its durable store write."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	executors, err := m.Int64ObservableGauge("jobplane.taskexecutors",
		metric.WithDescription("TaskExecutors registered at this process's ResourceManager while it leads."))
	errs[7] = err
	slots, err := m.Int64ObservableGauge("jobplane.slots",
		metric.WithDescription("Slots of the TaskExecutors registered at this process's ResourceManager, by state (total, free)."))
	errs[8] = err
	jobs, err := m.Int64ObservableGauge("jobplane.jobs",
		metric.WithDescription("Jobs the leading Dispatcher of this process knows, by current status (every status, 0 on a standby)."))
	errs[13] = err
	waiting, err := m.Int64ObservableGauge("jobplane.jobs.waiting",
		metric.WithDescription("Jobs that declared more slots than they hold, queued for slots at this process's ResourceManager while it leads."))
	errs[15] = err
	queued, err := m.Int64ObservableGauge("jobplane.jobs.queued",
		metric.WithDescription("Jobs waiting for a seat in the admission window of the leading Dispatcher of this process: not launched yet, holding no leadership."))
	errs[17] = err
	perExecutor, err := m.Int64ObservableGauge("jobplane.taskexecutor.slots",
		metric.WithDescription("Each registered TaskExecutor's slots, by TaskExecutor id and state (total, free), at this process's ResourceManager while it leads."))
	errs[16] = err
	in.jobDuration, errs[14] = m.Float64Histogram("jobplane.job.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a job's submission to its globally terminal status, by status."),
		metric.WithExplicitBucketBoundaries(jobBuckets...))
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("telemetry: instruments: %w", err)
		}
	}
	zeroCounters(in)
	total := metric.WithAttributeSet(attribute.NewSet(attribute.String("state", "total")))
	free := metric.WithAttributeSet(attribute.NewSet(attribute.String("state", "free")))
	in.registration, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var c Cluster
		for _, s := range clusterSources.list() {
			got := s()
			c.TaskExecutors += got.TaskExecutors
			c.Slots += got.Slots
			c.FreeSlots += got.FreeSlots
			c.JobsWaiting += got.JobsWaiting
			c.JobsQueued += got.JobsQueued
			for id, n := range got.ExecutorSlots {
				if c.ExecutorSlots == nil {
					c.ExecutorSlots = map[string][2]int{}
				}
				c.ExecutorSlots[id] = n
			}
			for st, n := range got.Jobs {
				if c.Jobs == nil {
					c.Jobs = map[jobplanev1.JobStatus]int{}
				}
				c.Jobs[st] += n
			}
		}
		o.ObserveInt64(executors, int64(c.TaskExecutors))
		o.ObserveInt64(slots, int64(c.Slots), total)
		o.ObserveInt64(slots, int64(c.FreeSlots), free)
		for st, name := range jobplanev1.JobStatus_name {
			if st != 0 {
				o.ObserveInt64(jobs, int64(c.Jobs[jobplanev1.JobStatus(st)]), metric.WithAttributes(attribute.String("status", strings.TrimPrefix(name, "JOB_STATUS_"))))
			}
		}
		o.ObserveInt64(waiting, int64(c.JobsWaiting))
		o.ObserveInt64(queued, int64(c.JobsQueued))
		for id, n := range c.ExecutorSlots {
			te := attribute.String("task_executor", id)
			o.ObserveInt64(perExecutor, int64(n[0]), metric.WithAttributes(te, attribute.String("state", "total")))
			o.ObserveInt64(perExecutor, int64(n[1]), metric.WithAttributes(te, attribute.String("state", "free")))
		}
		return nil
	}, executors, slots, jobs, waiting, queued, perExecutor)
	if err != nil {
		return fmt.Errorf("telemetry: instruments: %w", err)
	}
	if old := current.Swap(in); old != nil {
		_ = old.registration.Unregister()
	}
	return nil
}

// zeroCounters adds 0 to every counter under each attribute value it can
// take, so that /metrics lists them from the start (a dashboard's rate of
// a series that appears only at its first increment misses that one).
func zeroCounters(in *instruments) {
	ctx := context.Background()
	with := func(kvs ...attribute.KeyValue) metric.AddOption { return metric.WithAttributes(kvs...) }
	in.submitted.Add(ctx, 0)
	in.restarts.Add(ctx, 0)
	for _, status := range []string{"FINISHED", "FAILED", "CANCELED"} {
		in.ended.Add(ctx, 0, with(attribute.String("status", status)))
	}
	for _, change := range []string{"gained", "lost"} {
		in.leaderChanges.Add(ctx, 0, with(attribute.String("change", change)))
	}
	for _, service := range []string{"JobMasterService", "TaskExecutorService", "ResourceManagerService", "HAStore"} {
		in.fencing.Add(ctx, 0, with(attribute.String("service", service)))
	}
	for _, reason := range []jobplanev1.ErrorReason{
		jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS, jobplanev1.ErrorReason_ERROR_REASON_SUBMIT_RATE_EXCEEDED,
		jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_JOBS, jobplanev1.ErrorReason_ERROR_REASON_TOO_MANY_SUBTASKS,
	} {
		in.limits.Add(ctx, 0, with(attribute.String("reason", apierror.Reason(reason))))
	}
	for _, kind := range []string{"checkpoint", "savepoint"} {
		for _, outcome := range []string{"completed", "failed"} {
			in.checkpoints.Add(ctx, 0, with(attribute.String("kind", kind), attribute.String("outcome", outcome)))
		}
	}
}

// uninstall turns recording into a no-op if mp's instruments are the
// current ones.
func uninstall(mp metric.MeterProvider) {
	in := current.Load()
	if in != nil && in.provider == mp && current.CompareAndSwap(in, nil) {
		_ = in.registration.Unregister()
	}
}

// JobSubmitted counts a job that SubmitJob created, and the time the
// submission took.
func JobSubmitted(ctx context.Context, took time.Duration) {
	if in := current.Load(); in != nil {
		in.submitted.Add(ctx, 1)
		in.submitDuration.Record(ctx, took.Seconds())
	}
}

// JobEnded counts a job that reached the globally terminal status, such
// as "FINISHED".
func JobEnded(ctx context.Context, status string, took time.Duration) {
	if in := current.Load(); in != nil {
		in.ended.Add(ctx, 1, metric.WithAttributes(attribute.String("status", status)))
		in.jobDuration.Record(ctx, took.Seconds(), metric.WithAttributes(attribute.String("status", status)))
	}
}

// jobBuckets are the bounds of the job duration histogram, in seconds:
// from a tenth of a second to a day.
var jobBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600}

// LeaderChanged counts this process gaining (gained true) or losing the
// JobManager leadership.
func LeaderChanged(ctx context.Context, gained bool) {
	if in := current.Load(); in != nil {
		change := "lost"
		if gained {
			change = "gained"
		}
		in.leaderChanges.Add(ctx, 1, metric.WithAttributes(attribute.String("change", change)))
	}
}

// FencingRejected counts a call or store write that service (such as
// "TaskExecutorService" or "HAStore") refused for a stale fencing token.
func FencingRejected(ctx context.Context, service string) {
	if in := current.Load(); in != nil {
		in.fencing.Add(ctx, 1, metric.WithAttributes(attribute.String("service", service)))
	}
}

// JobRestarted counts a restart of a job or of a failed region of it.
func JobRestarted(ctx context.Context) {
	if in := current.Load(); in != nil {
		in.restarts.Add(ctx, 1)
	}
}

// CheckpointEnded counts a checkpoint or savepoint that ended, and for a
// completed one the time from its trigger (took) and from its last
// acknowledgement (stored) to its durable store write.
func CheckpointEnded(ctx context.Context, savepoint, completed bool, took, stored time.Duration) {
	in := current.Load()
	if in == nil {
		return
	}
	kind, outcome := "checkpoint", "failed"
	if savepoint {
		kind = "savepoint"
	}
	if completed {
		outcome = "completed"
		in.checkpointTook.Record(ctx, took.Seconds(), metric.WithAttributes(attribute.String("kind", kind)))
		in.checkpointSave.Record(ctx, stored.Seconds(), metric.WithAttributes(attribute.String("kind", kind)))
	}
	in.checkpoints.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", kind), attribute.String("outcome", outcome)))
}

// StoreWrite records the duration of one HA-store write.
func StoreWrite(ctx context.Context, took time.Duration) {
	if in := current.Load(); in != nil {
		in.storeWrite.Record(ctx, took.Seconds())
	}
}

// LimitRefused counts a call of the public API refused at a limit, by
// the reason of its ErrorInfo (such as "SUBMIT_RATE_EXCEEDED").
func LimitRefused(ctx context.Context, reason string) {
	if in := current.Load(); in != nil {
		in.limits.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", reason)))
	}
}

// Cluster is what a ResourceManager reports of its TaskExecutors.
type Cluster struct {
	// TaskExecutors is the number of registered TaskExecutors.
	TaskExecutors int
	// Slots is the number of their slots, and FreeSlots of those free.
	Slots, FreeSlots int
	// Jobs counts the jobs the leading Dispatcher knows, by status.
	Jobs map[jobplanev1.JobStatus]int
	// JobsWaiting counts the jobs waiting for slots at the leading
	// ResourceManager.
	JobsWaiting int
	// JobsQueued counts the jobs waiting for a seat in the leading
	// Dispatcher's admission window.
	JobsQueued int
	// ExecutorSlots are each registered TaskExecutor's slots, total and
	// free, by id.
	ExecutorSlots map[string][2]int
}

// sources are the functions read when the gauges are collected.
type sources struct {
	mu   sync.Mutex
	next int
	fns  map[int]func() Cluster
}

var clusterSources = &sources{fns: map[int]func() Cluster{}}

func (s *sources) list() []func() Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]func() Cluster, 0, len(s.fns))
	for _, fn := range s.fns {
		out = append(out, fn)
	}
	return out
}

// ObserveCluster makes the TaskExecutor and slot gauges report what fn
// returns (summed over every function registered), read only when the
// metrics are collected; fn must be safe to call from any goroutine. The
// returned function stops it. It may be called before Setup.
func ObserveCluster(fn func() Cluster) (stop func()) {
	clusterSources.mu.Lock()
	defer clusterSources.mu.Unlock()
	id := clusterSources.next
	clusterSources.next++
	clusterSources.fns[id] = fn
	return func() {
		clusterSources.mu.Lock()
		delete(clusterSources.fns, id)
		clusterSources.mu.Unlock()
	}
}
