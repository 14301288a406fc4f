// Command jobplane-bench runs the jobplane benchmarks of `make bench`: it
// starts the jobplane binary as a separate process per scenario, measures
// it beside a floor, prints a table and, with -out, writes it as Markdown
// (BENCHMARKS.md).
//
// Usage:
//
//	jobplane-bench [flags]     run the scenarios
//	jobplane-bench floor       serve the floor (the harness starts it)
//
// It exits 1 when a scenario could not run at all, never for a poor
// figure, and 2 for bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jobplane/jobplane/bench"
)

func main() {
	os.Exit(benchMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func benchMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "floor" {
		if err := bench.RunFloor(ctx, stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "jobplane-bench floor: %v\n", err)
			return 1
		}
		return 0
	}

	fs := flag.NewFlagSet("jobplane-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg     bench.Config
		out     string
		only    string
		command string
	)
	fs.StringVar(&cfg.JobPlane, "jobplane", "bin/jobplane", "the jobplane binary under test")
	fs.StringVar(&cfg.GoBench, "gobench", "", "a file of `go test -bench` output to report as row 6")
	fs.BoolVar(&cfg.Quick, "quick", os.Getenv("BENCH_QUICK") != "", "run every row briefly (one run, short durations, small counts); default from $BENCH_QUICK")
	fs.StringVar(&cfg.LogLevel, "log-level", "warn", "the JobManager's -log-level")
	fs.StringVar(&out, "out", "", "write the report as Markdown to this file (BENCHMARKS.md); none in quick mode")
	fs.StringVar(&only, "only", "", "comma-separated scenario numbers to run (default all)")
	fs.StringVar(&command, "command", "make bench", "the command to name in the report")
	fs.Func("jm-arg", "an extra flag for every JobManager started, repeatable (e.g. -jm-arg=--debug-listen=127.0.0.1:6060)", func(v string) error {
		cfg.JobManagerArgs = append(cfg.JobManagerArgs, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "jobplane-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "jobplane-bench: %v\n", err)
		return 1
	}
	cfg.Self = self
	cfg.Progress = stderr

	machine := bench.DescribeMachine(command)
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "jobplane-bench: %v\n", err)
		return 1
	}
	if err := rep.WriteText(stdout, machine); err != nil {
		fmt.Fprintf(stderr, "jobplane-bench: %v\n", err)
		return 1
	}
	if out != "" && !cfg.Quick && len(cfg.Only) == 0 {
		if err := writeFile(out, func(w io.Writer) error { return rep.WriteMarkdown(w, machine) }); err != nil {
			fmt.Fprintf(stderr, "jobplane-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", out)
	}
	if len(rep.Failed) > 0 {
		return 1
	}
	return 0
}

// writeFile writes a file through write, replacing it only once complete.
func writeFile(name string, write func(io.Writer) error) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}
