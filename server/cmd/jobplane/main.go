// Command jobplane is the reference jobplane server and its command-line
// client. Each server subcommand wires components into one oklog/run
// group; the client verbs talk to a cluster through the Go SDK. main
// itself only parses flags and wires.
//
// Usage:
//
//	jobplane standalone [flags]     a whole cluster in one process
//	jobplane jobmanager [flags]     Dispatcher, ResourceManager and JobMasters
//	jobplane taskexecutor [flags]   a TaskExecutor
//	jobplane hastore [flags]        an HA store for servers in other processes
//	jobplane backup [flags]         snapshot the HA store's etcd to a file
//	jobplane restore [flags]        restore a snapshot into a new data directory
//	jobplane certs ca|issue         make a test CA and certificates (mTLS)
//
//	jobplane submit FILE            submit a job graph (YAML or JSON) and follow it
//	jobplane list                   list jobs
//	jobplane status ID              a job's vertices, subtasks and failures
//	jobplane cancel ID              cancel a job
//	jobplane wait ID                wait for a job to end
//	jobplane logs ID                a job's task output
//	jobplane cluster                the leader, TaskExecutors and slots
//	jobplane completion SHELL       a shell completion script
//
// Run `jobplane <subcommand> -h` for the flags of each. The client verbs
// live in package cli (server/internal/cli), which root.go adds to the
// command tree; they reach the cluster at --server (or $JOBPLANE_SERVER),
// and their exit codes are listed in cli's exitcode.go.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jobplane/jobplane/server/internal/cli"
)

func main() {
	os.Exit(runMain(os.Args[1:], osStreams()))
}

// jobplaneMain executes the subcommand named by args[0] with stdout and
// stderr (and no standard input or terminal) and returns the exit code.
func jobplaneMain(args []string, stdout, stderr io.Writer) int {
	return runMain(args, cli.Streams{In: eofReader{}, Out: stdout, Err: stderr})
}

// eofReader is an empty standard input.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// serverSubcommand is a server verb of the jobplane binary: it parses its
// own flags with the standard flag package.
type serverSubcommand struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var serverSubcommands = []serverSubcommand{
	{"standalone", "run a whole cluster in one process, on an embedded HA store", runStandalone},
	{"jobmanager", "run a JobManager (Dispatcher, ResourceManager, JobMasters) on an HA store", runJobManager},
	{"taskexecutor", "run a TaskExecutor that joins the cluster through its HA store", runTaskExecutor},
	{"hastore", "serve an HA store (HAStoreService) for servers in other processes", runHAStore},
	{"etcd-member", "list or remove members of the HA store's etcd cluster", runEtcdMember},
	{"backup", "write a snapshot of the HA store's etcd to a file; restore makes a data directory of it", runBackup},
	{"restore", "restore a snapshot into a new, empty data directory for a server's embedded etcd member", runRestore},
	{"certs", "make a test CA and certificates for TLS and mutual TLS between the cluster's processes", runCerts},
}

// parseFlags parses args into fs and maps the outcome to an exit code:
// ok is false when the caller must return code at once (help or bad usage).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	case err != nil:
		return exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments: %q\n", fs.Name(), fs.Args())
		return exitUsage, false
	}
	return exitOK, true
}

// command is what every server subcommand starts with: its flag set,
// usage text and logging flags.
type command struct {
	fs   *flag.FlagSet
	logs logFlags
}

// newCommand returns the command name, whose usage prints description (a
// paragraph) before the flags.
func newCommand(name, description string, stderr io.Writer) *command {
	c := &command{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.logs.register(c.fs)
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "Usage: jobplane %s [flags]\n\n%s\n\nFlags:\n", name, description)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args and builds the logger; ok is false when the caller
// must return code at once (help or bad usage).
func (c *command) parse(args []string, stderr io.Writer) (log *slog.Logger, code int, ok bool) {
	if code, ok := parseFlags(c.fs, args); !ok {
		return nil, code, false
	}
	log, err := c.logs.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.fs.Name(), err)
		return nil, exitUsage, false
	}
	return log, exitOK, true
}
