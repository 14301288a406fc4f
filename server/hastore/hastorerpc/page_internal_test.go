package hastorerpc

import (
	"fmt"
	"testing"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// A page of job results holds no more than maxPageBytes of them, and at
// least one: results of a megabyte each (values, placements) would
// otherwise make a page of a thousand that no server could send, and a
// new leader's recovery, which lists them all, would fail for good.
func TestResultPagesFitTheirBytes(t *testing.T) {
	t.Parallel()
	big := func(i int) *hastorev1.JobResultEntry {
		return &hastorev1.JobResultEntry{Result: &jobplanev1.JobResult{
			JobId:  fmt.Sprintf("j%03d", i),
			Values: []*jobplanev1.SubtaskValue{{Value: make([]byte, 900<<10)}},
		}}
	}
	var entries []*hastorev1.JobResultEntry
	for i := range 20 {
		entries = append(entries, big(i))
	}
	n := fitPage(entries)
	if n < 1 || n >= len(entries) {
		t.Fatalf("fitPage kept %d of %d results of 900 KiB, want at least one and fewer than all", n, len(entries))
	}
	size := 0
	for _, e := range entries[:n] {
		size += len(e.GetResult().GetValues()[0].GetValue())
	}
	if size > maxPageBytes {
		t.Errorf("a page holds %d bytes of values, over %d", size, maxPageBytes)
	}
	if n := fitPage(entries[:1]); n != 1 {
		t.Errorf("fitPage of one result = %d, want 1", n)
	}
	huge := []*hastorev1.JobResultEntry{{Result: &jobplanev1.JobResult{JobId: "h", Values: []*jobplanev1.SubtaskValue{{Value: make([]byte, maxPageBytes+1)}}}}, big(1)}
	if n := fitPage(huge); n != 1 {
		t.Errorf("fitPage with a first result over the bound = %d, want 1 (a page holds at least one)", n)
	}
}
