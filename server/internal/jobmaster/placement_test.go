package jobmaster

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

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
		{"latest", "v", 0, -1, Placement{Attempt: 2, TaskExecutorID: "te-2"}, nil},
		{"latest by number", "v", 0, 2, Placement{Attempt: 2, TaskExecutorID: "te-2"}, nil},
		{"a failed attempt, from the exception history", "v", 0, 1, Placement{Attempt: 1, TaskExecutorID: "te-1"}, nil},
		{"an earlier attempt that did not fail, where the latest went", "v", 0, 0, Placement{Attempt: 0, TaskExecutorID: "te-2"}, nil},
		{"an attempt not deployed yet", "v", 0, 3, Placement{}, ErrNotPlaced},
		{"a subtask never deployed", "v", 1, -1, Placement{}, ErrNotPlaced},
		{"a failed attempt of a subtask not deployed since", "v", 1, 0, Placement{Attempt: 0, TaskExecutorID: "te-9"}, nil},
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

func TestPlacementsFindEarlierAttempts(t *testing.T) {
	t.Parallel()
	p := &Placements{
		order:    []string{"v"},
		vertices: map[string][]Placement{"v": {{Attempt: 3, TaskExecutorID: "te-3"}}},
		earlier:  map[string][][]Placement{"v": {{{Attempt: 1, TaskExecutorID: "te-1"}, {Attempt: 2, TaskExecutorID: "te-2"}}}},
	}
	for attempt, want := range map[int]string{-1: "te-3", 3: "te-3", 2: "te-2", 1: "te-1", 0: "te-3"} {
		if got, err := p.Find("v", 0, attempt); err != nil || got.TaskExecutorID != want {
			t.Errorf("Find(v, 0, %d) = %+v, %v; want on %s", attempt, got, err, want)
		}
	}
}

// The placements kept with a result: per subtask its attempts in order,
// in graph vertex order; past the size bound, each subtask's latest only.
func TestPlacementsProto(t *testing.T) {
	t.Parallel()
	p := &Placements{
		order: []string{"b", "a"},
		vertices: map[string][]Placement{
			"a": {{Attempt: 0, TaskExecutorID: "te-1", Address: "http://a"}, {}},
			"b": {{Attempt: 2, TaskExecutorID: "te-2", Address: "http://b"}},
		},
		earlier: map[string][][]Placement{"b": {{{Attempt: 0, TaskExecutorID: "te-1"}, {Attempt: 1, TaskExecutorID: "te-1"}}}},
	}
	var got []string
	for _, ap := range p.Proto() {
		a := ap.GetAttempt()
		got = append(got, fmt.Sprintf("%s/%d/%d@%s,%s", a.GetVertexId(), a.GetSubtaskIndex(), a.GetAttemptNumber(), ap.GetTaskExecutorId(), ap.GetTaskExecutorAddress()))
	}
	want := []string{"b/0/0@te-1,", "b/0/1@te-1,", "b/0/2@te-2,http://b", "a/0/0@te-1,http://a"}
	if !slices.Equal(got, want) {
		t.Errorf("Proto() = %v, want %v", got, want)
	}

	// A job of many subtasks, each with 8 attempts: too large to keep all.
	const n = 2000
	big := &Placements{order: []string{"v"}, vertices: map[string][]Placement{"v": make([]Placement, n)}, earlier: map[string][][]Placement{"v": make([][]Placement, n)}}
	for i := range n {
		big.vertices["v"][i] = Placement{Attempt: 7, TaskExecutorID: "te-0123456789ab-0", Address: "http://127.0.0.1:40000"}
		for a := range 7 {
			big.earlier["v"][i] = append(big.earlier["v"][i], Placement{Attempt: a, TaskExecutorID: "te-0123456789ab-0", Address: "http://127.0.0.1:40000"})
		}
	}
	kept := big.Proto()
	size := proto.Size(&jobplanev1.JobResult{Placements: kept})
	if size > maxPlacementBytes || len(kept) != n {
		t.Errorf("%d placements of %d bytes kept, want each subtask's latest (%d) within %d bytes", len(kept), size, n, maxPlacementBytes)
	}
	for _, ap := range kept {
		if ap.GetAttempt().GetAttemptNumber() != 7 {
			t.Fatalf("kept %v, want only the latest attempts", ap)
		}
	}
}

// Stored placements know no graph: what they do not name is not placed.
func TestStoredPlacementsFind(t *testing.T) {
	t.Parallel()
	at := func(v string, s, a int32, te string) *jobplanev1.AttemptPlacement {
		return &jobplanev1.AttemptPlacement{Attempt: &jobplanev1.ExecutionAttemptId{VertexId: v, SubtaskIndex: s, AttemptNumber: a}, TaskExecutorId: te, TaskExecutorAddress: "http://" + te}
	}
	p := PlacementsOf([]*jobplanev1.AttemptPlacement{at("v", 0, 0, "te-1"), at("v", 0, 1, "te-2"), at("v", 1, 0, "te-3")})
	for _, tc := range []struct {
		vertex           string
		subtask, attempt int
		want             Placement
		wantErr          error
	}{
		{"v", 0, -1, Placement{Attempt: 1, TaskExecutorID: "te-2", Address: "http://te-2"}, nil},
		{"v", 0, 0, Placement{Attempt: 0, TaskExecutorID: "te-1", Address: "http://te-1"}, nil},
		{"v", 1, -1, Placement{Attempt: 0, TaskExecutorID: "te-3", Address: "http://te-3"}, nil},
		{"v", 0, 5, Placement{}, ErrNotPlaced},
		{"v", 2, -1, Placement{}, ErrNotPlaced},
		{"w", 0, -1, Placement{}, ErrNotPlaced},
	} {
		got, err := p.Find(tc.vertex, tc.subtask, tc.attempt)
		if got != tc.want || !errors.Is(err, tc.wantErr) {
			t.Errorf("Find(%q, %d, %d) = %+v, %v; want %+v, %v", tc.vertex, tc.subtask, tc.attempt, got, err, tc.want, tc.wantErr)
		}
	}
}
