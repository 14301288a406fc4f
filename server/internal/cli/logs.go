package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// followInterval is how often logs --follow asks for more output: the
// output of a task does not wake a waiting call, so a follower polls.
const followInterval = 300 * time.Millisecond

// subtaskRef names one subtask of a job.
type subtaskRef struct {
	vertex  string
	subtask int32
}

func logsCommand(a *app) *cobra.Command {
	var (
		vertex  string
		subtask int32
		attempt int32
		follow  bool
	)
	c := &cobra.Command{
		Use:   "logs ID",
		Short: "print the output of a job's tasks",
		Long: "Prints the output of a job's tasks, as their TaskExecutors keep it: the last\n" +
			"64 KiB of each attempt, for a while after it ended (24 hours on disk with\n" +
			"--output-dir, a standalone's default; else 10 minutes in memory).\n" +
			"\n" +
			"What is captured: an exec task's standard output and error; a Go function's\n" +
			"Task.Logger lines and what it writes to Task.Output. Not captured: a Go worker\n" +
			"process's own standard output and error (fmt.Printf, os.Stdout), which belong\n" +
			"to no one task.\n" +
			"\n" +
			"Without --vertex, every subtask of the job, each under a header; --vertex\n" +
			"alone, every subtask of the vertex (of a job that ended a while ago, or before\n" +
			"a restart, those its result says ran). Without --attempt, the subtask's latest\n" +
			"attempt. --follow prints the output of one subtask as it comes, going on to its\n" +
			"next attempt if it restarts, until the job ends (or Ctrl-C).",
		Example:           "  jobplane logs nightly --vertex greet --subtask 1\n  jobplane logs nightly --vertex greet --subtask 0 --follow",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			client, err := a.connect()
			if err != nil {
				return err
			}
			defer client.Close()
			refs, err := a.subtasksOf(cmd.Context(), client, id, vertex, subtask, cmd.Flags().Changed("subtask"))
			if err != nil {
				return err
			}
			var att *int32
			if cmd.Flags().Changed("attempt") {
				att = &attempt
			}
			if follow {
				if len(refs) != 1 {
					return exit(exitUsage, fmt.Errorf("--follow follows one subtask; the job has %d: name one with --vertex and --subtask", len(refs)))
				}
				return a.followOutput(cmd.Context(), client, id, refs[0], att)
			}
			for i, r := range refs {
				if len(refs) > 1 {
					if i > 0 {
						fmt.Fprintln(a.s.Out)
					}
					fmt.Fprintf(a.s.Out, "==> vertex %s, subtask %d <==\n", r.vertex, r.subtask)
				}
				if _, _, err := a.printOutput(cmd.Context(), client, id, r, att, 0); err != nil {
					if len(refs) == 1 || !errors.Is(err, errNoOutput) {
						return err
					}
					fmt.Fprintf(a.s.Out, "(%v)\n", err)
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&vertex, "vertex", "", "the vertex whose output to print (default: every vertex)")
	c.Flags().Int32Var(&subtask, "subtask", 0, "the subtask of --vertex (default: every subtask of the vertex)")
	c.Flags().Int32Var(&attempt, "attempt", 0, "the attempt (default: the subtask's latest deployed attempt)")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "print the output of one subtask as it comes, until it ends")
	return c
}

// subtasksOf returns the subtasks to print: the one named, every one of
// the vertex, or every one of the job (from its graph, which the cluster
// keeps while the job runs).
func (a *app) subtasksOf(ctx context.Context, client *sdk.Client, id, vertex string, subtask int32, oneSubtask bool) ([]subtaskRef, error) {
	if oneSubtask && vertex == "" {
		return nil, exit(exitUsage, errors.New("--subtask needs --vertex"))
	}
	if vertex != "" && oneSubtask {
		return []subtaskRef{{vertex, subtask}}, nil
	}
	rctx, cancel := a.requestContext(ctx)
	defer cancel()
	d, err := client.Get(rctx, id, sdk.WithSubtaskPageSize(1))
	if err != nil {
		return nil, fail(err, nil)
	}
	vertices := d.GetJobGraph().GetVertices()
	if len(vertices) == 0 {
		if terminal(d.GetSummary().GetStatus()) {
			if refs := a.placedSubtasks(ctx, client, id, vertex); len(refs) > 0 {
				return refs, nil
			}
		}
		return nil, exit(exitUsage, fmt.Errorf("job %s has ended and the cluster no longer keeps its graph: name the subtask with --vertex and --subtask", id))
	}
	var refs []subtaskRef
	for _, v := range vertices {
		if vertex != "" && v.GetId() != vertex {
			continue
		}
		for i := range v.GetParallelism() {
			refs = append(refs, subtaskRef{v.GetId(), i})
		}
	}
	if len(refs) == 0 {
		return nil, exit(exitUsage, fmt.Errorf("job %s has no vertex %q", id, vertex))
	}
	return refs, nil
}

// placedSubtasks returns the subtasks of an ended job (of vertex, if
// named) that its result says were deployed (JobResult.placements), in
// the graph's order; none if the result cannot be read.
func (a *app) placedSubtasks(ctx context.Context, client *sdk.Client, id, vertex string) []subtaskRef {
	rctx, cancel := a.requestContext(ctx)
	defer cancel()
	res, err := client.Wait(rctx, id) // the job has ended: answered at once
	if err != nil {
		return nil
	}
	var refs []subtaskRef
	for _, p := range res.GetPlacements() {
		r := subtaskRef{p.GetAttempt().GetVertexId(), p.GetAttempt().GetSubtaskIndex()}
		if (vertex == "" || r.vertex == vertex) && (len(refs) == 0 || refs[len(refs)-1] != r) {
			refs = append(refs, r)
		}
	}
	return refs
}

// errNoOutput marks a subtask whose output is not there (not deployed
// yet, or no longer kept).
var errNoOutput = errors.New("no output")

// printOutput prints a subtask's output from offset to its current end
// and returns the answer of the last read.
func (a *app) printOutput(ctx context.Context, client *sdk.Client, id string, r subtaskRef, attempt *int32, offset int64) (*jobplanev1.GetTaskOutputResponse, int64, error) {
	for {
		rctx, cancel := a.requestContext(ctx)
		resp, err := client.TaskOutput(rctx, &jobplanev1.GetTaskOutputRequest{
			JobId: id, VertexId: r.vertex, SubtaskIndex: r.subtask, AttemptNumber: attempt, Offset: offset,
		})
		cancel()
		if err != nil {
			return nil, offset, outputError(err, id, r)
		}
		if n := resp.GetDroppedBytes(); n > 0 {
			fmt.Fprintf(a.s.Err, "[%d earlier bytes of vertex %s, subtask %d are no longer kept]\n", n, r.vertex, r.subtask)
		}
		a.s.Out.Write(resp.GetData())
		offset = resp.GetNextOffset()
		if offset >= resp.GetEndOffset() || len(resp.GetData()) == 0 {
			return resp, offset, nil
		}
	}
}

// outputError says why a subtask's output could not be read.
func outputError(err error, id string, r subtaskRef) error {
	switch {
	case errors.Is(err, sdk.ErrJobNotFound):
		return exit(exitError, fmt.Errorf("no job %s", id))
	case connect.CodeOf(err) == connect.CodeNotFound:
		return exit(exitError, fmt.Errorf("vertex %s, subtask %d: %w: not deployed yet, or no longer kept (%v)", r.vertex, r.subtask, errNoOutput, connectMessage(err)))
	case connect.CodeOf(err) == connect.CodeInvalidArgument:
		return exit(exitUsage, fmt.Errorf("vertex %s, subtask %d: %s", r.vertex, r.subtask, connectMessage(err)))
	}
	return exit(exitError, fmt.Errorf("vertex %s, subtask %d: %s", r.vertex, r.subtask, connectMessage(err)))
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// followOutput prints a subtask's output as it comes: the attempt asked
// for until it ends, or the latest attempt, going on to the next one when
// the subtask restarts, until the job ends.
func (a *app) followOutput(ctx context.Context, client *sdk.Client, id string, r subtaskRef, attempt *int32) error {
	var (
		offset  int64
		current int32 = -1
	)
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		rctx, cancel := a.requestContext(ctx)
		resp, err := client.TaskOutput(rctx, &jobplanev1.GetTaskOutputRequest{
			JobId: id, VertexId: r.vertex, SubtaskIndex: r.subtask, AttemptNumber: attempt, Offset: offset,
		})
		cancel()
		switch {
		case err != nil && connect.CodeOf(err) == connect.CodeNotFound && !errors.Is(err, sdk.ErrJobNotFound):
			// Not deployed yet, or, once the job ended, no longer kept.
			if a.jobEnded(ctx, client, id) {
				if current < 0 {
					return outputError(err, id, r)
				}
				return nil
			}
		case err != nil:
			return outputError(err, id, r)
		case current >= 0 && resp.GetAttemptNumber() != current:
			// A new attempt: first the rest of the previous one, then the
			// new one's from 0.
			prev := current
			a.printRest(ctx, client, id, r, prev, offset)
			current, offset = resp.GetAttemptNumber(), 0
			fmt.Fprintf(a.s.Err, "[vertex %s, subtask %d: attempt %d]\n", r.vertex, r.subtask, current)
			continue
		default:
			current = resp.GetAttemptNumber()
			if n := resp.GetDroppedBytes(); n > 0 {
				fmt.Fprintf(a.s.Err, "[%d earlier bytes of vertex %s, subtask %d are no longer kept]\n", n, r.vertex, r.subtask)
			}
			a.s.Out.Write(resp.GetData())
			offset = resp.GetNextOffset()
			if offset < resp.GetEndOffset() && len(resp.GetData()) > 0 {
				continue // more is there already
			}
			if resp.GetEnded() && (attempt != nil || a.jobEnded(ctx, client, id)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// printRest prints the output of an ended attempt from offset on. The
// server may not find the attempt for a moment (while its JobMaster hands
// its placements over as the job ends): it asks a few times, and says so
// if the rest stays out of reach.
func (a *app) printRest(ctx context.Context, client *sdk.Client, id string, r subtaskRef, attempt int32, offset int64) {
	var err error
	for try := 0; try < 5; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(followInterval):
			}
		}
		if _, offset, err = a.printOutput(ctx, client, id, r, &attempt, offset); err == nil {
			return
		}
	}
	fmt.Fprintf(a.s.Err, "[the rest of attempt %d of vertex %s, subtask %d could not be read: %v]\n", attempt, r.vertex, r.subtask, err)
}

// jobEnded reports whether the job has ended for good, so that no new
// attempt will come.
func (a *app) jobEnded(ctx context.Context, client *sdk.Client, id string) bool {
	rctx, cancel := a.requestContext(ctx)
	defer cancel()
	d, err := client.Get(rctx, id, sdk.WithSummaryView())
	if err != nil {
		// An unknown job has ended (its result is gone); a cluster that
		// does not answer now has not told us so.
		return errors.Is(err, sdk.ErrJobNotFound)
	}
	return terminal(d.GetSummary().GetStatus())
}
