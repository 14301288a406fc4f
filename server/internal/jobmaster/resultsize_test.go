package jobmaster

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/jobgraph"
	"github.com/jobplane/jobplane/sdk/wire/taskvalue"
	"github.com/jobplane/jobplane/server/hastore"
)

// The largest JobResult the bounds allow fits the HA store's limit (the
// plan limit, 1 MiB by default, which results share): task values up to
// their job-wide bound as the JobMaster counts them (each encoded entry),
// as many accumulators as allowed with the longest names and the longest
// totals, placements up to their bound, and a full exception history of
// the longest failure messages. A bound raised without room for it
// fails here, before a job whose result cannot be written loops through
// leader step-downs.
func TestLargestResultFitsTheStore(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	failure := func() *jobplanev1.FailureInfo {
		return &jobplanev1.FailureInfo{
			Message: long(maxFailureBytes + len("… (truncated)")), Time: timestamppb.Now(),
			Attempt:        &jobplanev1.ExecutionAttemptId{VertexId: long(128), SubtaskIndex: math.MaxInt32, AttemptNumber: math.MaxInt32},
			TaskExecutorId: long(128),
		}
	}
	res := &jobplanev1.JobResult{
		JobId: long(jobgraph.MaxJobIDLength), Status: jobplanev1.JobStatus_JOB_STATUS_FAILED,
		SubmitTime: timestamppb.Now(), EndTime: timestamppb.Now(), Failure: failure(),
		RestartCount: math.MaxInt32, Name: long(256), PlanDigest: make([]byte, 32), SubmittedBy: long(256),
		Accumulators: map[string]int64{},
	}
	for range maxExceptions {
		res.ExceptionHistory = append(res.ExceptionHistory, failure())
	}
	// Values: the JobMaster keeps them while their encoded entries sum to
	// at most the bound.
	for used := 0; ; {
		v := &jobplanev1.SubtaskValue{
			Attempt: &jobplanev1.ExecutionAttemptId{VertexId: long(128), SubtaskIndex: math.MaxInt32, AttemptNumber: math.MaxInt32},
			Value:   make([]byte, taskvalue.DefaultMaxTaskValueBytes),
		}
		n := proto.Size(&jobplanev1.JobResult{Values: []*jobplanev1.SubtaskValue{v}})
		if used+n > taskvalue.DefaultMaxResultValueBytes {
			// The last one fills what is left.
			v.Value = v.Value[:len(v.Value)-(used+n-taskvalue.DefaultMaxResultValueBytes)]
			res.Values = append(res.Values, v)
			break
		}
		res.Values, used = append(res.Values, v), used+n
	}
	for i := range taskvalue.DefaultMaxAccumulators {
		name := fmt.Sprintf("%0*d", taskvalue.MaxNameBytes, i)
		res.Accumulators[name] = math.MinInt64
	}
	// Placements: Proto keeps them within maxPlacementBytes, counting
	// each as its size and 4 bytes of framing.
	for used, i := 0, 0; ; i++ {
		ap := &jobplanev1.AttemptPlacement{
			Attempt:        &jobplanev1.ExecutionAttemptId{VertexId: long(16), SubtaskIndex: int32(i), AttemptNumber: 7},
			TaskExecutorId: long(32), TaskExecutorAddress: "https://" + long(40) + ":65535",
		}
		n := proto.Size(ap) + 4
		if used+n > maxPlacementBytes {
			break
		}
		res.Placements, used = append(res.Placements, ap), used+n
	}
	size := proto.Size(res)
	t.Logf("the largest result: %d bytes (values %d, placements %d), the store's limit %d", size,
		proto.Size(&jobplanev1.JobResult{Values: res.Values}), proto.Size(&jobplanev1.JobResult{Placements: res.Placements}), hastore.DefaultMaxPlanBytes)
	if size > hastore.DefaultMaxPlanBytes {
		t.Errorf("the largest JobResult the bounds allow is %d bytes, over the store's limit of %d", size, hastore.DefaultMaxPlanBytes)
	}
}
