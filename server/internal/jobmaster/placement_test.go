package jobmaster

import (
	"errors"
	"testing"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
)

func TestPlacementsFind(t *testing.T) {
	t.Parallel()
	p := &Placements{
		vertices: map[string][]Placement{
			"v": {{Attempt: 2, TaskExecutorID: "te-2"}, {}},
		},
		failed: []*jobplanev1.FailureInfo{
			{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", SubtaskIndex: 0, AttemptNumber: 1}, TaskExecutorId: "te-1"},
			{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: "v", SubtaskIndex: 1, AttemptNumber: 0}, TaskExecutorId: "te-9"},
		},
	}
	for _, tc := range []struct {
		name             string
		vertex           string
		subtask, attempt int
		want             Placement
		wantErr          error
	}{
		{"latest", "v", 0, -1, Placement{2, "te-2"}, nil},
		{"latest by number", "v", 0, 2, Placement{2, "te-2"}, nil},
		{"a failed attempt, from the exception history", "v", 0, 1, Placement{1, "te-1"}, nil},
		{"an earlier attempt that did not fail, where the latest went", "v", 0, 0, Placement{0, "te-2"}, nil},
		{"an attempt not deployed yet", "v", 0, 3, Placement{}, ErrNotPlaced},
		{"a subtask never deployed", "v", 1, -1, Placement{}, ErrNotPlaced},
		{"a failed attempt of a subtask not deployed since", "v", 1, 0, Placement{0, "te-9"}, nil},
		{"unknown vertex", "w", 0, -1, Placement{}, ErrUnknownVertex},
		{"subtask out of range", "v", 2, -1, Placement{}, ErrSubtaskOutOfRange},
		{"negative subtask", "v", -1, -1, Placement{}, ErrSubtaskOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := p.Find(tc.vertex, tc.subtask, tc.attempt)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("Find(%q, %d, %d) = %+v, %v; want %+v, %v", tc.vertex, tc.subtask, tc.attempt, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
