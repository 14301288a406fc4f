// Command jobplane is the reference jobplane server and its command-line
// client. Each subcommand wires components into one oklog/run group; main
// itself only parses flags and wires.
//
// Usage:
//
//	jobplane standalone [flags]     a whole cluster in one process
//	jobplane jobmanager [flags]     Dispatcher, ResourceManager and JobMasters
//	jobplane taskexecutor [flags]   a TaskExecutor
//	jobplane hastore [flags]        an HA store for servers in other processes
//
// Run `jobplane <subcommand> -h` for the flags of each.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(jobplaneMain(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommand is one verb of the jobplane binary.
type subcommand struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var subcommands = []subcommand{
	{"standalone", "run a whole cluster in one process, on an embedded HA store", runStandalone},
	{"jobmanager", "run a JobManager (Dispatcher, ResourceManager, JobMasters) on an HA store", runJobManager},
	{"taskexecutor", "run a TaskExecutor that joins the cluster through its HA store", runTaskExecutor},
	{"hastore", "serve an HA store (HAStoreService) for servers in other processes", runHAStore},
}

// jobplaneMain executes the subcommand named by args[0] and returns the exit code.
func jobplaneMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, sc := range subcommands {
		if sc.name == args[0] {
			return sc.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "jobplane: unknown subcommand %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: jobplane <subcommand> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Subcommands:")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'jobplane <subcommand> -h' for its flags.")
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

// command is what every subcommand starts with: its flag set, usage text
// and logging flags.
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
