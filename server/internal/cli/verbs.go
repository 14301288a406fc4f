package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
	"github.com/jobplane/jobplane/sdk/jobgraph"
)

// clientCommands are the client verbs.
func clientCommands(a *app) []*cobra.Command {
	return []*cobra.Command{
		submitCommand(a), listCommand(a), statusCommand(a), cancelCommand(a), purgeCommand(a), waitCommand(a), resultCommand(a), logsCommand(a), clusterCommand(a),
		checkpointsCommand(a), savepointCommand(a), savepointsCommand(a), deleteSavepointCommand(a),
	}
}

// connect returns an SDK client for the --server URLs.
func (a *app) connect() (*sdk.Client, error) {
	urls, err := a.servers()
	if err != nil {
		return nil, err
	}
	retry := a.retry
	if retry <= 0 {
		retry = -1 // no retries: each URL once
	}
	opts := []sdk.Option{sdk.WithRetry(sdk.RetryPolicy{MaxElapsed: retry}), sdk.WithInterceptors(rateNotice(a.s.Err))}
	if a.tlsCA != "" {
		cfg, err := tlsConfig(a.tlsCA)
		if err != nil {
			return nil, exit(exitUsage, fmt.Errorf("--tls-ca: %w", err))
		}
		opts = append(opts, sdk.WithTLSConfig(cfg))
	}
	tokenOpt, err := a.token.option()
	if err != nil {
		return nil, err
	}
	if tokenOpt != nil {
		opts = append(opts, tokenOpt)
	}
	c, err := sdk.New(urls, opts...)
	if err != nil {
		return nil, exit(exitUsage, fmt.Errorf("--server: %w", err))
	}
	return c, nil
}

// tlsConfig returns the TLS configuration that trusts the certificate
// authorities in the PEM file caFile instead of the system's roots. It
// fails if the file cannot be read or holds no PEM certificate.
func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %s holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// requestContext bounds one request (not the following of a job) by
// --timeout.
func (a *app) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.timeout)
}

// fail maps an error of the SDK to the command's exit: an invalid job
// (file given: submit) lists each violation placed in the file, another
// invalid request (a malformed job id, say) is bad usage, and anything
// else says the SDK's plain sentence.
func fail(err error, file *jobFile) error {
	var notOffered *sdk.InvokableNotOfferedError
	if errors.As(err, &notOffered) {
		return invokablesNotOffered(notOffered, file)
	}
	var invalid *sdk.InvalidJobError
	if errors.As(err, &invalid) && file == nil {
		parts := make([]string, len(invalid.Violations))
		for i, v := range invalid.Violations {
			parts[i] = v.Field + ": " + v.Description
		}
		return exit(exitUsage, fmt.Errorf("invalid request: %s", strings.Join(parts, "; ")))
	}
	if errors.As(err, &invalid) {
		var b strings.Builder
		if errors.Unwrap(invalid) == nil {
			b.WriteString("the job is invalid; nothing was submitted:")
		} else {
			b.WriteString("the cluster refused the job as invalid; nothing was submitted:")
		}
		for _, v := range invalid.Violations {
			b.WriteString("\n")
			b.WriteString(file.violation(v.Field, v.Description))
		}
		if len(invalid.Violations) == 0 {
			b.WriteString(" " + err.Error())
		}
		return exit(exitInvalidJob, errors.New(b.String()))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return exit(exitError, fmt.Errorf("no answer within --timeout: %v", err))
	}
	return exit(exitError, err)
}

func submitCommand(a *app) *cobra.Command {
	var (
		id          string
		detached    bool
		skipCheck   bool
		restoreFrom string
		idReuse     string
	)
	c := &cobra.Command{
		Use:   "submit FILE",
		Short: "submit a job graph (YAML or JSON) and follow it to its end",
		Long: "Submits the JobGraph in FILE (YAML or JSON with the proto's field names; - reads\n" +
			"standard input), checked first by the contract's rules, so that an invalid graph\n" +
			"is reported with its place in the file and nothing is submitted.\n\n" +
			"Attached (the default), it follows the job: a live display on a terminal, one\n" +
			"line per status change and per restart otherwise; it exits 0 when the job\n" +
			"FINISHED, 3 when it FAILED, 4 when it was CANCELED. Ctrl-C asks whether to\n" +
			"cancel the job or detach; without a terminal, SIGINT detaches (exit 6) and the\n" +
			"job goes on.\n\n" +
			"Detached (-d), it prints the job id and exits once the job is acknowledged.\n\n" +
			"--restore-from starts the job's subtasks from their states in a savepoint\n" +
			"('jobplane savepoint'), in place of the file's config.restore_from_savepoint.",
		Example: "  jobplane submit examples/pipeline.yaml\n  jobplane submit -d --id nightly-2026-12-01 job.json\n" +
			"  jobplane submit --restore-from sp-nightly-42 examples/checkpoints.yaml",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := a.format()
			if err != nil {
				return err
			}
			if id != "" && !jobgraph.ValidJobID(id) {
				return exit(exitUsage, fmt.Errorf("--id %q: %s", id, jobgraph.JobIDRule))
			}
			submitOpts := []sdk.SubmitOption{}
			switch idReuse {
			case "", "reject-duplicate":
			case "allow-duplicate":
				submitOpts = append(submitOpts, sdk.WithIDReuse())
			default:
				return exit(exitUsage, fmt.Errorf("--id-reuse %q: want reject-duplicate or allow-duplicate", idReuse))
			}
			file, err := readJobFile(args[0], a.s.In)
			if err != nil {
				return exit(exitInvalidJob, err)
			}
			restoreBy := "the job file's config.restore_from_savepoint"
			if restoreFrom != "" {
				if file.graph.Config == nil {
					file.graph.Config = &jobplanev1.JobConfig{}
				}
				file.graph.Config.RestoreFromSavepoint = restoreFrom
				restoreBy = "--restore-from"
			}
			client, err := a.connect()
			if err != nil {
				return err
			}
			defer client.Close()
			ctx, cancel := a.requestContext(cmd.Context())
			if !skipCheck {
				if err := checkInvokables(ctx, client, file); err != nil {
					cancel()
					return err
				}
			}
			// The id is chosen here, not by the SDK, so that a submission
			// whose outcome is unknown can be named and retried as the
			// same job.
			if id == "" {
				id = sdk.NewJobID()
			}
			var sub *sdk.Submitted
			err = a.afterCleanup(ctx, id, func() error {
				var err error
				sub, err = client.Submit(ctx, file.graph, append(submitOpts, sdk.WithJobID(id))...)
				return err
			})
			cancel()
			if errors.Is(err, sdk.ErrCleanupPending) {
				return exit(exitError, fmt.Errorf("job %s ended but its cleanup did not finish in time, so its id cannot run again yet; nothing was submitted, try again later", id))
			}
			if errors.Is(err, sdk.ErrSavepointNotFound) {
				return savepointNotFound(file.graph.GetConfig().GetRestoreFromSavepoint(), restoreBy)
			}
			if errors.Is(err, sdk.ErrCheckpointsUnsupported) {
				return checkpointFail(err)
			}
			if err != nil {
				if !errors.As(err, new(*sdk.InvalidJobError)) && !errors.As(err, new(*sdk.DuplicateJobError)) &&
					!errors.As(err, new(*sdk.InvokableNotOfferedError)) && !refusedAtLimit(err) {
					fmt.Fprintf(a.s.Err, "job %s: the submission may or may not have been persisted; 'jobplane submit --id %s %s' again is safe (the same id and graph are the same job)\n", id, id, args[0])
				}
				return fail(err, file)
			}
			if hb := file.graph.GetConfig().GetClientHeartbeatTimeout().AsDuration(); hb > 0 && detached {
				fmt.Fprintf(a.s.Err, "job %s is attached (client_heartbeat_timeout %v): the cluster cancels it unless 'jobplane wait %s' attaches within that time\n", sub.JobID, hb, sub.JobID)
			}
			if detached {
				return a.printSubmitted(format, sub)
			}
			if !sub.Created {
				fmt.Fprintf(a.s.Err, "job %s exists already with the same graph (%s); following it\n", sub.JobID, statusName(sub.Status))
			}
			return a.follow(cmd.Context(), client, sub.JobID, format)
		},
	}
	c.Flags().StringVar(&id, "id", "", "the job's id (the same id and graph submitted again is the same job); made up when empty")
	c.Flags().BoolVarP(&detached, "detached", "d", false, "print the job id and exit once the job is acknowledged")
	c.Flags().BoolVar(&skipCheck, "skip-invokable-check", false,
		"skip this command's own check that the cluster's TaskExecutors offer every vertex's invokable (a cluster of contract 1.2 checks it again itself)")
	c.Flags().StringVar(&restoreFrom, "restore-from", "",
		"start the job's subtasks from their states in this savepoint (its id, from 'jobplane savepoint'); overrides the file's config.restore_from_savepoint")
	_ = c.RegisterFlagCompletionFunc("restore-from", a.completeSavepointIDs)
	c.Flags().StringVar(&idReuse, "id-reuse", "reject-duplicate",
		"what a submission of an id whose job ended does: reject-duplicate answers the kept result (the job never runs again); allow-duplicate removes it and runs the job anew, under a new run id")
	return c
}

// checkInvokables refuses a job that names an invokable no TaskExecutor
// of the cluster offers, placing each such vertex in the file. A cluster
// of contract 1.2 refuses such a job itself (INVOKABLE_NOT_OFFERED, which
// invokablesNotOffered places the same way); with an older one the job
// would only fail at deployment. A cluster without TaskExecutors, or one
// whose TaskExecutors cannot be listed, is not checked.
func checkInvokables(ctx context.Context, client *sdk.Client, file *jobFile) error {
	offered := map[string]bool{}
	executors := 0
	for te, err := range client.TaskExecutors(ctx) {
		if err != nil {
			return nil
		}
		executors++
		for _, inv := range te.GetInvokables() {
			offered[inv] = true
		}
	}
	if executors == 0 {
		return nil
	}
	var missing []string
	for i, v := range file.graph.GetVertices() {
		if !offered[v.GetInvokable()] {
			desc := fmt.Sprintf("no TaskExecutor of the cluster offers invokable %q", v.GetInvokable())
			if v.GetInvokable() == "exec" {
				desc += "; exec is offered only by TaskExecutors started with --allow-exec"
			}
			missing = append(missing, file.violation(fmt.Sprintf("job_graph.vertices[%d].invokable", i), desc))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(offered))
	return exit(exitInvalidJob, fmt.Errorf("%s\nthe cluster's %d TaskExecutors offer: %s; nothing was submitted",
		strings.Join(missing, "\n"), executors, strings.Join(names, ", ")))
}

// invokablesNotOffered reports the cluster's refusal of a job whose
// invokables no registered TaskExecutor offers (INVOKABLE_NOT_OFFERED),
// placing each such vertex's invokable in the file, as checkInvokables
// does before submitting.
func invokablesNotOffered(e *sdk.InvokableNotOfferedError, file *jobFile) error {
	var b strings.Builder
	b.WriteString("the cluster refused the job: no registered TaskExecutor offers its invokables; nothing was submitted:")
	for _, v := range e.Violations {
		b.WriteString("\n")
		b.WriteString(file.violation(v.Field, v.Description))
	}
	if len(e.Violations) == 0 {
		b.WriteString(" " + strings.Join(e.Invokables, ", "))
	}
	offered := strings.Join(e.Offered, ", ")
	if offered == "" {
		offered = "none"
	}
	fmt.Fprintf(&b, "\nthe cluster's TaskExecutors offer: %s; submit the job again once a TaskExecutor that offers its invokables has joined", offered)
	return exit(exitInvalidJob, errors.New(b.String()))
}

// printSubmitted reports a detached submission: the job id alone on
// standard output (for scripts) and a sentence on standard error, or the
// SubmitJobResponse as JSON or YAML.
func (a *app) printSubmitted(format string, sub *sdk.Submitted) error {
	if format != "table" {
		return printStructured(a.s.Out, format, &jobplanev1.SubmitJobResponse{JobId: sub.JobID, Created: sub.Created, Status: sub.Status, RunId: sub.RunID})
	}
	fmt.Fprintln(a.s.Out, sub.JobID)
	verb := "submitted"
	if !sub.Created {
		verb = "exists already with the same graph"
	}
	fmt.Fprintf(a.s.Err, "job %s %s (%s); 'jobplane wait %s' follows it\n", sub.JobID, verb, statusName(sub.Status), sub.JobID)
	return nil
}

// clientRun makes the RunE of a client verb: it checks -o, makes the
// client, and runs fn with both, closing the client after.
func (a *app) clientRun(fn func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		format, err := a.format()
		if err != nil {
			return err
		}
		client, err := a.connect()
		if err != nil {
			return err
		}
		defer client.Close()
		return fn(cmd, args, client, format)
	}
}

func waitCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "wait ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "follow a job to its end; the exit code is the job's, as for submit",
		Args:              cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			return a.follow(cmd.Context(), client, args[0], format)
		}),
	}
}

func resultCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "result ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "show an ended job's result: its status, the values its tasks returned, its accumulators",
		Long: "Shows the result the cluster keeps for an ended job (also after a restart or a\n" +
			"change of leader): how it ended, the value each subtask's finished attempt\n" +
			"returned (as text when it is valid UTF-8, else as base64), and its accumulators\n" +
			"(each summed over one finished attempt per subtask). It does not wait: a job\n" +
			"that has not ended yet is an error ('jobplane wait' follows it). The exit code is\n" +
			"the job's, as for wait: 0 FINISHED, 3 FAILED, 4 CANCELED. -o json prints the\n" +
			"JobResult as protojson (values in base64).",
		Example: "  jobplane result nightly-2026-12-01\n  jobplane result -o json nightly-2026-12-01 | jq '.accumulators'",
		Args:    cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			res, err := client.Result(ctx, args[0])
			if errors.Is(err, sdk.ErrJobNotTerminal) {
				return exit(exitError, fmt.Errorf("job %s has not ended yet; 'jobplane wait %s' follows it to its end", args[0], args[0]))
			}
			if err != nil {
				return fail(err, nil)
			}
			if format != "table" {
				if err := printStructured(a.s.Out, format, res); err != nil {
					return err
				}
			} else {
				renderResult(a.s.Out, res)
			}
			if code := exitCodeOf(res.GetStatus()); code != exitOK {
				return exit(code, nil)
			}
			return nil
		}),
	}
}

func listCommand(a *app) *cobra.Command {
	var statuses []string
	c := &cobra.Command{
		Use:   "list",
		Short: "list jobs, running and ended",
		Args:  cobra.NoArgs,
		RunE: a.clientRun(func(cmd *cobra.Command, _ []string, client *sdk.Client, format string) error {
			var opts []sdk.ListOption
			if len(statuses) > 0 {
				st, err := parseStatuses(statuses)
				if err != nil {
					return exit(exitUsage, err)
				}
				opts = append(opts, sdk.WithStatuses(st...))
			}
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			var jobs []*jobplanev1.JobSummary
			for j, err := range client.List(ctx, opts...) {
				if err != nil {
					return fail(err, nil)
				}
				jobs = append(jobs, j)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.ListJobsResponse{Jobs: jobs})
			}
			renderJobList(a.s.Out, jobs, time.Now())
			return nil
		}),
	}
	c.Flags().StringSliceVar(&statuses, "status", nil, "only jobs in these statuses (comma-separated or repeated), such as running,failed")
	return c
}

// parseStatuses reads job statuses by name, in any case, with or without
// the JOB_STATUS_ prefix.
func parseStatuses(names []string) ([]jobplanev1.JobStatus, error) {
	var out []jobplanev1.JobStatus
	for _, n := range names {
		key := strings.ToUpper(strings.TrimSpace(n))
		if !strings.HasPrefix(key, "JOB_STATUS_") {
			key = "JOB_STATUS_" + key
		}
		v, ok := jobplanev1.JobStatus_value[key]
		if !ok || v == 0 {
			var valid []string
			for i := 1; i < len(jobplanev1.JobStatus_name); i++ {
				valid = append(valid, strings.ToLower(statusName(jobplanev1.JobStatus(i))))
			}
			return nil, fmt.Errorf("--status %q: want one of %s", n, strings.Join(valid, ", "))
		}
		if st := jobplanev1.JobStatus(v); !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out, nil
}

func statusCommand(a *app) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:               "status ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "show a job: its vertices, subtasks and failures",
		Args:              cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			d, err := client.Get(ctx, args[0])
			if err != nil {
				return fail(err, nil)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, d)
			}
			renderJobDetails(a.s.Out, d, time.Now(), all)
			return nil
		}),
	}
	c.Flags().BoolVar(&all, "all", false, fmt.Sprintf("list every subtask (by default at most %d)", maxSubtaskRows))
	return c
}

func cancelCommand(a *app) *cobra.Command {
	var reason, requestID, runID string
	c := &cobra.Command{
		Use:               "cancel ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "cancel a job (it ends CANCELED unless it ended already)",
		Example:           "  jobplane cancel --reason 'superseded by nightly-2' nightly-1",
		Args:              cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			// Only the flags given are sent: a server before contract 1.2
			// refuses fields it does not know.
			opts := []sdk.CancelOption{sdk.WithReason(reason), sdk.WithRun(runID), sdk.WithRequestID(requestID)}
			st, err := client.Cancel(ctx, args[0], opts...)
			if errors.Is(err, sdk.ErrJobNotFound) && runID != "" {
				return exit(exitError, fmt.Errorf("job %s has no run %s (its current job is another run, or none); nothing was canceled", args[0], runID))
			}
			if errors.Is(err, sdk.ErrJobTerminal) {
				status := "FINISHED or FAILED"
				var e *sdk.Error
				if errors.As(err, &e) && e.Metadata["status"] != "" {
					status = strings.TrimPrefix(e.Metadata["status"], "JOB_STATUS_")
				}
				return exit(exitError, fmt.Errorf("job %s has ended already (%s); there is nothing to cancel", args[0], status))
			}
			if err != nil {
				return fail(err, nil)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.CancelJobResponse{Status: st})
			}
			fmt.Fprintf(a.s.Out, "job %s %s\n", args[0], statusName(st))
			return nil
		}),
	}
	c.Flags().StringVar(&reason, "reason", "", "why the job is canceled, recorded with the request and shown in the job's status and result (at most 1,024 bytes)")
	c.Flags().StringVar(&requestID, "request-id", "", "the cancel request's id, recorded with it")
	c.Flags().StringVar(&runID, "run", "", "cancel only this run of the job id (its run id, from 'jobplane status'); by default the current one")
	return c
}

// afterCleanup calls do, and again while it fails with
// sdk.ErrCleanupPending: an ended job's cleanup takes moments, and a purge
// or an id reuse waits for it (saying so once) rather than make the user
// try again. ctx bounds the wait; its error is do's last.
func (a *app) afterCleanup(ctx context.Context, id string, do func() error) error {
	said := false
	for {
		err := do()
		if !errors.Is(err, sdk.ErrCleanupPending) {
			return err
		}
		if !said {
			fmt.Fprintf(a.s.Err, "job %s ended and its cleanup is not done yet: waiting for it\n", id)
			said = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func purgeCommand(a *app) *cobra.Command {
	var runID string
	c := &cobra.Command{
		Use:               "purge ID",
		ValidArgsFunction: a.completeJobIDs,
		Short:             "remove an ended job's kept result now, freeing its id for a new run",
		Args:              cobra.ExactArgs(1),
		RunE: a.clientRun(func(cmd *cobra.Command, args []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			err := a.afterCleanup(ctx, args[0], func() error { return client.Purge(ctx, args[0], runID) })
			switch {
			case errors.Is(err, sdk.ErrJobNotTerminal):
				return exit(exitError, fmt.Errorf("job %s has not ended; cancel it first ('jobplane cancel %s')", args[0], args[0]))
			case errors.Is(err, sdk.ErrCleanupPending):
				return exit(exitError, fmt.Errorf("job %s ended but its cleanup did not finish in time; nothing was purged, try again later", args[0]))
			case err != nil:
				return fail(err, nil)
			}
			if format != "table" {
				return printStructured(a.s.Out, format, &jobplanev1.PurgeJobResponse{})
			}
			fmt.Fprintf(a.s.Out, "job %s purged: its id is free\n", args[0])
			return nil
		}),
	}
	c.Flags().StringVar(&runID, "run", "", "purge only this run of the job id (its run id); by default the current one")
	return c
}

func clusterCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "show the cluster: its leader, TaskExecutors and slots",
		Args:  cobra.NoArgs,
		RunE: a.clientRun(func(cmd *cobra.Command, _ []string, client *sdk.Client, format string) error {
			ctx, cancel := a.requestContext(cmd.Context())
			defer cancel()
			o, err := client.Cluster(ctx)
			if err != nil {
				return fail(err, nil)
			}
			var tes []*jobplanev1.TaskExecutorInfo
			for te, err := range client.TaskExecutors(ctx) {
				if err != nil {
					return fail(err, nil)
				}
				tes = append(tes, te)
			}
			if format != "table" {
				msgs := make([]proto.Message, len(tes))
				for i, te := range tes {
					msgs[i] = te
				}
				return printFields(a.s.Out, format, field{name: "overview", msgs: []proto.Message{o}},
					field{name: "task_executors", msgs: msgs, list: true})
			}
			renderCluster(a.s.Out, o, tes)
			return nil
		}),
	}
}

// completeJobIDs completes a job id argument with the ids of the
// cluster's jobs, running ones first (for shell completion; silent on
// any error).
func (a *app) completeJobIDs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
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
	var running, ended []string
	for j, err := range client.List(ctx) {
		if err != nil {
			break
		}
		if id := j.GetJobId(); strings.HasPrefix(id, prefix) {
			line := id + "\t" + j.GetName() + " " + statusName(j.GetStatus())
			if terminal(j.GetStatus()) {
				ended = append(ended, line)
			} else {
				running = append(running, line)
			}
		}
	}
	return append(running, ended...), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}
