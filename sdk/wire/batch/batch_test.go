package batch_test

import (
	"strings"
	"testing"

	clusterv1 "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	"github.com/jobplane/jobplane/sdk/wire/batch"
)

func deployments(n, configBytes int) []*clusterv1.TaskDeployment {
	out := make([]*clusterv1.TaskDeployment, n)
	for i := range out {
		out[i] = &clusterv1.TaskDeployment{AllocationId: "a", Config: map[string]string{"k": strings.Repeat("x", configBytes)}}
	}
	return out
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		items       []*clusterv1.TaskDeployment
		wantRuns    int
		wantLargest int
	}{
		{"none", nil, 0, 0},
		{"few small", deployments(50, 10), 1, 50},
		{"many small: by count", deployments(2*batch.MaxItems+1, 10), 3, batch.MaxItems},
		{"large: by bytes", deployments(8, batch.MaxBytes/3), 4, 2},
		{"one too large goes alone", deployments(2, batch.MaxBytes+1), 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runs := batch.Split(tc.items)
			if len(runs) != tc.wantRuns {
				t.Fatalf("got %d runs, want %d", len(runs), tc.wantRuns)
			}
			total, largest := 0, 0
			for _, r := range runs {
				if len(r) == 0 {
					t.Errorf("an empty run")
				}
				total += len(r)
				largest = max(largest, len(r))
			}
			if total != len(tc.items) || largest != tc.wantLargest {
				t.Errorf("got %d items, largest run %d; want %d, %d", total, largest, len(tc.items), tc.wantLargest)
			}
			// Order is kept: runs are consecutive.
			i := 0
			for _, r := range runs {
				for _, it := range r {
					if it != tc.items[i] {
						t.Fatalf("item %d out of order", i)
					}
					i++
				}
			}
		})
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	ids := make([]string, batch.MaxItems+5)
	for i := range ids {
		ids[i] = "0123456789abcdef"
	}
	runs := batch.Strings(ids)
	if len(runs) != 2 || len(runs[0]) != batch.MaxItems || len(runs[1]) != 5 {
		t.Errorf("got runs of %d, want %d and 5", lens(runs), batch.MaxItems)
	}
	if got := batch.Strings(nil); len(got) != 0 {
		t.Errorf("Strings(nil) = %v, want no run", got)
	}
}

func lens(runs [][]string) []int {
	var out []int
	for _, r := range runs {
		out = append(out, len(r))
	}
	return out
}
