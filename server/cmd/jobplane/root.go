package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// streams are the standard streams of a command.
type streams struct {
	in  io.Reader
	out io.Writer
	err io.Writer
}

// osStreams are the process's standard streams.
func osStreams() streams {
	return streams{in: os.Stdin, out: os.Stdout, err: os.Stderr}
}

// eofReader is an empty standard input.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// terminal reports whether standard output is a terminal, and its width
// in columns (80 when unknown).
func (s streams) terminal() (ok bool, width int) {
	f, isFile := s.out.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 {
		w = 80
	}
	return true, w
}

// interactive reports whether standard input is a terminal, so that the
// user can answer a question.
func (s streams) interactive() bool {
	f, ok := s.in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// defaultServer is the cluster a client verb reaches without --server or
// $JOBPLANE_SERVER.
const defaultServer = "http://127.0.0.1:8080"

// serverEnv names the environment variable that sets the default of
// --server.
const serverEnv = "JOBPLANE_SERVER"

// tlsCAEnv names the environment variable that sets the default of
// --tls-ca.
const tlsCAEnv = "JOBPLANE_TLS_CA"

// runMain executes the jobplane command line args with streams s and returns
// the exit code.
func runMain(args []string, s streams) int {
	root := newRootCommand(s)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if errors.As(err, &ce) {
		ce = authFailure(ce)
		if ce.err != nil {
			fmt.Fprintf(s.err, "jobplane: %v\n", ce.err)
		}
		return ce.code
	}
	// Any other error is cobra's: an unknown command, flag or argument.
	fmt.Fprintf(s.err, "jobplane: %v\nRun 'jobplane --help' for usage.\n", err)
	return exitUsage
}

// newRootCommand builds the jobplane command tree on streams s.
func newRootCommand(s streams) *cobra.Command {
	a := &app{s: s}
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
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q", args[0])
			}
			cmd.SetOut(s.err)
			_ = cmd.Usage()
			return exit(exitUsage, nil)
		},
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddGroup(
		&cobra.Group{ID: "client", Title: "Client commands (reach the cluster at --server):"},
		&cobra.Group{ID: "server", Title: "Server commands (run '<command> -h' for their flags):"},
	)
	root.PersistentFlags().StringVar(&a.server, "server", envOr(serverEnv, defaultServer),
		"base URL of the cluster (comma-separated for several JobManagers; the leader is followed; default $"+serverEnv+" if set)")
	root.PersistentFlags().StringVar(&a.tlsCA, "tls-ca", envOr(tlsCAEnv, ""),
		"PEM file of the certificate authorities to trust, instead of the system's, for https:// servers (default $"+tlsCAEnv+" if set)")
	registerTokenFlags(root, a)
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second, "bound on each request to the cluster (not on following a job)")
	root.PersistentFlags().DurationVar(&a.retry, "retry", 15*time.Second,
		"how long to retry a cluster that does not answer or has no leader (a failover, a restart), from the first failure; also while following a job; 0 tries each server once")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format of the client commands: table, json or yaml")

	for _, sc := range serverSubcommands {
		root.AddCommand(serverCommand(sc, s))
	}
	for _, c := range clientCommands(a) {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	return root
}

// serverCommand wraps a server subcommand, which parses its own flags
// with the flag package, exactly as before the client verbs existed.
func serverCommand(sc serverSubcommand, s streams) *cobra.Command {
	c := &cobra.Command{
		Use:                sc.name + " [flags]",
		Short:              sc.summary,
		GroupID:            "server",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := sc.run(args, s.out, s.err); code != exitOK {
				return exit(code, nil)
			}
			return nil
		},
	}
	c.SetHelpFunc(func(*cobra.Command, []string) { sc.run([]string{"-h"}, s.out, s.err) })
	return c
}

// envOr returns the environment variable name, or def when it is unset
// or empty.
func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

// app holds what every client verb shares: the streams and the global
// flags.
type app struct {
	s       streams
	server  string
	tlsCA   string
	token   tokenFlags
	output  string
	timeout time.Duration
	retry   time.Duration
}

// servers returns the --server URLs.
func (a *app) servers() ([]string, error) {
	var urls []string
	for _, u := range strings.Split(a.server, ",") {
		if u = strings.TrimSpace(u); u != "" {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return nil, exit(exitUsage, fmt.Errorf("--server %q: want URLs such as http://127.0.0.1:8080", u))
			}
			urls = append(urls, strings.TrimRight(u, "/"))
		}
	}
	if len(urls) == 0 {
		return nil, exit(exitUsage, errors.New("--server is empty"))
	}
	return urls, nil
}

// format returns the --output format, checked.
func (a *app) format() (string, error) {
	switch a.output {
	case "table", "json", "yaml":
		return a.output, nil
	}
	return "", exit(exitUsage, fmt.Errorf("--output %q: want table, json or yaml", a.output))
}
