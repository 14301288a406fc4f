package cli

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

// Streams are the standard streams of the client verbs. In gives the job
// file "-" and the answer to the question an interrupt asks; Out gets
// results; Err gets messages. The live display of a followed job is drawn
// only when Out is a terminal (an *os.File), and the question is asked
// only when In is one too.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// terminal reports whether standard output is a terminal, and its width
// in columns (80 when unknown).
func (s Streams) terminal() (ok bool, width int) {
	f, isFile := s.Out.(*os.File)
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
func (s Streams) interactive() bool {
	f, ok := s.In.(*os.File)
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

// AddCommands adds the client verbs (submit, list, status, cancel, wait,
// logs, cluster, checkpoints, savepoint, savepoints and delete-savepoint)
// to root, in root's command group groupID, which root
// must have (cobra panics on an unknown group). It adds the flags the
// verbs share to root's persistent flags: --server (default
// $JOBPLANE_SERVER, else http://127.0.0.1:8080), --tls-ca (default
// $JOBPLANE_TLS_CA), --token and --token-file (read from $JOBPLANE_TOKEN
// and $JOBPLANE_TOKEN_FILE when a verb runs, never shown as defaults),
// --timeout (30s), --retry (15s) and -o/--output (table). The verbs read
// and write s, not root's streams.
//
// A verb that fails returns an error with an ExitCode() int method: the
// process should print the error's message, when it is not empty, on
// standard error and exit with that code (the exit codes are listed in
// exitcode.go). The errors of cobra itself, such as an unknown flag or a
// missing argument, have no such method and mean bad usage.
func AddCommands(root *cobra.Command, groupID string, s Streams) {
	a := &app{s: s}
	root.PersistentFlags().StringVar(&a.server, "server", envOr(serverEnv, defaultServer),
		"base URL of the cluster (comma-separated for several JobManagers; the leader is followed; default $"+serverEnv+" if set)")
	root.PersistentFlags().StringVar(&a.tlsCA, "tls-ca", envOr(tlsCAEnv, ""),
		"PEM file of the certificate authorities to trust, instead of the system's, for https:// servers (default $"+tlsCAEnv+" if set)")
	registerTokenFlags(root, a)
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second, "bound on each request to the cluster (not on following a job)")
	root.PersistentFlags().DurationVar(&a.retry, "retry", 15*time.Second,
		"how long to retry a cluster that does not answer or has no leader (a failover, a restart), from the first failure; also while following a job; 0 tries each server once")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format of the client commands: table, json or yaml")

	for _, c := range clientCommands(a) {
		c.GroupID = groupID
		c.RunE = withAuthFailure(c.RunE)
		root.AddCommand(c)
	}
}

// withAuthFailure wraps a verb's RunE so that an end on an
// UNAUTHENTICATED or PERMISSION_DENIED answer gets its own exit code and
// a sentence that says what to do (see authFailure).
func withAuthFailure(run func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		var ce *codeError
		if errors.As(err, &ce) {
			return authFailure(ce)
		}
		return err
	}
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
	s       Streams
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
