package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// The checkpoint verbs: checkpoints, savepoint, savepoints and
// delete-savepoint (and submit's --restore-from, in verbs.go).

// checkpointFail maps an error of a checkpoint or savepoint call to the
// command's exit: a server that keeps no checkpoints gets a sentence of
// its own, anything else is fail's.
func checkpointFail(err error) error {
	if errors.Is(err, sdk.ErrCheckpointsUnsupported) {
		return exit(exitError, errors.New("this server's HA store keeps no checkpoints or savepoints (it answered UNIMPLEMENTED): "+
			"checkpoints need a server of contract 1.2 or later whose store keeps them (the etcd store does)"))
	}
	return fail(err, nil)
}

func checkpointsCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "checkpoints ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "show a job's checkpoint statistics and the completed checkpoints the cluster keeps",
		Long: "Shows a job's checkpoints: how many were completed and failed, the one in progress,\n" +
			"the latest completed and what the job's subtasks were last restored from, then each\n" +
			"completed checkpoint the cluster keeps (config.checkpoints.retained of them): its id,\n" +
			"when it was triggered, how long it took (from its trigger to its last subtask's\n" +
			"acknowledgement), its inline state's size and how many subtasks have state in it.\n" +
			"A job takes checkpoints when its job file sets config.checkpoints.interval.",
		Example: "  jobplane checkpoints nightly\n  jobplane checkpoints nightly -o json",
		Args:    cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			resp, err := client.Checkpoints(ctx, args[0])
			if err != nil {
				return checkpointFail(err)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, resp)
			}
			renderCheckpoints(a.s.Out, args[0], resp, time.Now())
			return nil
		}),
	}
}

func savepointCommand(a *app) *cobra.Command {
	var stop bool
	c := &cobra.Command{
		Use:               "savepoint ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "take a savepoint of a running job (--stop: then cancel it); prints the savepoint's id",
		Long: "Takes a savepoint of a running job: every running subtask gives its state, and the\n" +
			"cluster keeps the states as a savepoint until 'jobplane delete-savepoint', whatever\n" +
			"becomes of the job. It prints the savepoint's id once the savepoint is durable;\n" +
			"'jobplane submit --restore-from ID FILE' starts a job whose subtasks go on from it.\n\n" +
			"With --stop, the job is canceled once the savepoint is durable (it ends CANCELED):\n" +
			"stop a job, change it, and submit it again from where it stopped.\n\n" +
			"The request is not repeated when no answer comes (a repeat would take a second\n" +
			"savepoint): 'jobplane savepoints --job ID' then says whether it was taken.",
		Example: "  jobplane savepoint nightly\n  sp=$(jobplane savepoint --stop nightly) && jobplane submit --restore-from \"$sp\" job.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			job := args[0]
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			var opts []sdk.SavepointOption
			if stop {
				opts = append(opts, sdk.WithStop())
			}
			sp, err := client.TriggerSavepoint(ctx, job, opts...)
			if err != nil {
				return a.savepointFail(err, job)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.TriggerSavepointResponse{Savepoint: sp})
			}
			fmt.Fprintln(a.s.Out, sp.GetSavepointId())
			info := sp.GetCheckpoint()
			fmt.Fprintf(a.s.Err, "savepoint %s of job %s is durable (checkpoint %d, %s of state from %d subtasks)\n",
				sp.GetSavepointId(), job, info.GetCheckpointId(), sizeText(info.GetStateBytes()), info.GetSubtaskStates())
			if stop {
				fmt.Fprintf(a.s.Err, "job %s was stopped: it is canceled and ends CANCELED; 'jobplane submit --restore-from %s FILE' goes on from the savepoint\n",
					job, sp.GetSavepointId())
			} else {
				fmt.Fprintf(a.s.Err, "job %s runs on; 'jobplane submit --restore-from %s FILE' starts a job from the savepoint\n", job, sp.GetSavepointId())
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&stop, "stop", false, "cancel the job once the savepoint is durable (stop with savepoint)")
	return c
}

// savepointFail maps an error of TriggerSavepoint to the command's exit,
// saying what became of the job.
func (a *app) savepointFail(err error, job string) error {
	switch {
	case errors.Is(err, sdk.ErrSavepointFailed):
		var e *sdk.Error
		msg := err.Error()
		if errors.As(err, &e) {
			msg = e.Message
		}
		return exit(exitError, fmt.Errorf("no savepoint of job %s was taken, and the job runs on: %s; try again once all its subtasks run ('jobplane status %s')", job, msg, job))
	case errors.Is(err, sdk.ErrJobTerminal):
		return exit(exitError, fmt.Errorf("job %s is ending or has ended; a savepoint needs a running job", job))
	case errors.Is(err, sdk.ErrCheckpointsUnsupported), errors.Is(err, sdk.ErrJobNotFound):
		return checkpointFail(err)
	}
	if outcomeUnknown(err) {
		fmt.Fprintf(a.s.Err, "job %s: the savepoint may or may not have been taken; 'jobplane savepoints --job %s' lists the job's savepoints\n", job, job)
	}
	return fail(err, nil)
}

// outcomeUnknown reports whether a call that failed with err may have
// been carried out all the same: no answer came, or the cluster could not
// tell.
func outcomeUnknown(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal, connect.CodeCanceled:
		return true
	}
	return false
}

func savepointsCommand(a *app) *cobra.Command {
	var job string
	c := &cobra.Command{
		Use:   "savepoints",
		Short: "list the savepoints the cluster keeps, of every job or of one",
		Long: "Lists the savepoints the cluster keeps, in id order: each one's id (what\n" +
			"'jobplane submit --restore-from' takes), its job, its checkpoint id, when it was\n" +
			"triggered, how long it took, its inline state's size and how many subtasks have\n" +
			"state in it. A savepoint outlives its job: --job lists an ended job's too.",
		Example: "  jobplane savepoints\n  jobplane savepoints --job nightly -o yaml",
		Args:    cobra.NoArgs,
		RunE: a.clientRun(func(cmd *cobra.Command, _ []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			var sps []*jobplanev1.SavepointInfo
			for sp, err := range client.Savepoints(ctx, job) {
				if err != nil {
					return checkpointFail(err)
				}
				sps = append(sps, sp)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.ListSavepointsResponse{Savepoints: sps})
			}
			renderSavepoints(a.s.Out, sps)
			return nil
		}),
	}
	c.Flags().StringVar(&job, "job", "", "only this job's savepoints")
	_ = c.RegisterFlagCompletionFunc("job", a.completeJobIDs)
	return c
}

func deleteSavepointCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "delete-savepoint SAVEPOINT",
		ValidArgsFunction: a.completeSavepointIDs,
		Short:             "delete a savepoint (deleting one that does not exist is no error)",
		Long: "Deletes a savepoint the cluster keeps. Jobs that were restored from it run on; a job\n" +
			"submitted to restore from it and not yet started fails. Deleting a savepoint that\n" +
			"does not exist, or no longer does, succeeds.",
		Example: "  jobplane delete-savepoint sp-nightly-42",
		Args:    cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			if err := client.DeleteSavepoint(ctx, args[0]); err != nil {
				return checkpointFail(err)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.DeleteSavepointResponse{})
			}
			fmt.Fprintf(a.s.Out, "savepoint %s deleted\n", args[0])
			return nil
		}),
	}
}

// completeSavepointIDs completes a savepoint id with the ids of the
// cluster's savepoints (for shell completion; silent on any error).
func (a *app) completeSavepointIDs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	client, err := a.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
	defer cancel()
	var ids []string
	for sp, err := range client.Savepoints(ctx, "") {
		if err != nil {
			break
		}
		if id := sp.GetSavepointId(); strings.HasPrefix(id, prefix) {
			ids = append(ids, id+"\tjob "+sp.GetJobId())
		}
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// savepointNotFound is submit's error for a job that restores from a
// savepoint the cluster does not keep; by says who named it.
func savepointNotFound(id, by string) error {
	return exit(exitError, fmt.Errorf("no savepoint %q (named by %s): the cluster keeps none of that id, 'jobplane savepoints' lists those it keeps; nothing was submitted", id, by))
}
