package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/jobplane/jobplane/server/internal/cli"
)

// Exit codes of the server subcommands. The client verbs (package cli)
// share 0, 1 and 2 and add their own above them.
const (
	// exitOK: done.
	exitOK = 0
	// exitError: the command failed.
	exitError = 1
	// exitUsage: bad flags or arguments.
	exitUsage = 2
)

// codeError ends a server subcommand, or the bare root command, with an
// exit code; the subcommand has printed why already.
type codeError struct{ code int }

func (e *codeError) Error() string { return "" }

// ExitCode returns the process exit code.
func (e *codeError) ExitCode() int { return e.code }

// exitCoder is an error that ends the process with its exit code, after
// its message, when it has one, is printed on standard error. The server
// subcommands end with a codeError, the client verbs with cli's errors.
type exitCoder interface {
	error
	ExitCode() int
}

// osStreams are the process's standard streams.
func osStreams() cli.Streams {
	return cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
}

// runMain executes the jobplane command line args with streams s and returns
// the exit code.
func runMain(args []string, s cli.Streams) int {
	root := newRootCommand(s)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintf(s.Err, "jobplane: %s\n", msg)
		}
		return ec.ExitCode()
	}
	// Any other error is cobra's: an unknown command, flag or argument.
	fmt.Fprintf(s.Err, "jobplane: %v\nRun 'jobplane --help' for usage.\n", err)
	return exitUsage
}

// newRootCommand builds the jobplane command tree on streams s: the
// server subcommands, and the client verbs of package cli with their
// global flags.
func newRootCommand(s cli.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "jobplane",
		Short: "jobplane runs a job control plane and submits and follows jobs on it",
		Long: "jobplane is the reference jobplane server (standalone, jobmanager, taskexecutor,\n" +
			"hastore) and its command-line client (submit, list, status, cancel, wait, logs,\n" +
			"cluster).\n\n" +
			"Exit codes of the client verbs: 0 done (submit and wait: the job FINISHED),\n" +
			"1 error (the cluster unreachable or refusing, the job not found), 2 bad usage,\n" +
			"3 the job FAILED, 4 the job was CANCELED, 5 the job file is invalid (nothing\n" +
			"was submitted), 6 detached on an interrupt (the job goes on), 7 not\n" +
			"authenticated (no valid --token), 8 permission denied by the cluster's policy.",
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q", args[0])
			}
			cmd.SetOut(s.Err)
			_ = cmd.Usage()
			return &codeError{exitUsage}
		},
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddGroup(
		&cobra.Group{ID: "client", Title: "Client commands (reach the cluster at --server):"},
		&cobra.Group{ID: "server", Title: "Server commands (run '<command> -h' for their flags):"},
	)
	for _, sc := range serverSubcommands {
		root.AddCommand(serverCommand(sc, s))
	}
	cli.AddCommands(root, "client", s)
	return root
}

// serverCommand wraps a server subcommand, which parses its own flags
// with the flag package, exactly as before the client verbs existed.
func serverCommand(sc serverSubcommand, s cli.Streams) *cobra.Command {
	c := &cobra.Command{
		Use:                sc.name + " [flags]",
		Short:              sc.summary,
		GroupID:            "server",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := sc.run(args, s.Out, s.Err); code != exitOK {
				return &codeError{code}
			}
			return nil
		},
	}
	c.SetHelpFunc(func(*cobra.Command, []string) { sc.run([]string{"-h"}, s.Out, s.Err) })
	return c
}

// version is what `jobplane --version` prints: the module's version, the
// commit it was built from (with "+dirty" for uncommitted changes), and
// the contract it serves.
func version() string {
	v, rev, dirty := "(devel)", "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return fmt.Sprintf("%s, commit %s, contract %s, %s", v, rev, contractVersion, runtime.Version())
}

// contractVersion is the contract (proto/) this build serves.
const contractVersion = "1.2"
