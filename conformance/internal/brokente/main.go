// Command brokente is the reference TaskExecutor with one promise of the
// contract broken, for the conformance suite's own tests: every case of
// the TaskExecutor mode (--taskexecutor-command) must fail against some
// broken TaskExecutor. It runs the reference TaskExecutor in-process, as
// `jobplane taskexecutor --conformance-invokables` does, with
// interceptors on the calls it serves and makes; --break says what they
// break (see breaks).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/jobplane/jobplane/conformance/invokable"
	"github.com/jobplane/jobplane/sdk/taskexecutor"
	"github.com/jobplane/jobplane/sdk/wire/transport"
	"github.com/jobplane/jobplane/server/component"
)

func main() {
	var mode, hastoreURL, listen string
	flag.StringVar(&mode, "break", "", "the promise to break: "+strings.Join(names(), ", "))
	flag.StringVar(&hastoreURL, "hastore", "", "the runner's HA store")
	flag.StringVar(&listen, "listen", "127.0.0.1:0", "the address to serve TaskExecutorService on")
	flag.Parse()
	if _, ok := breaks[mode]; !ok {
		fmt.Fprintf(os.Stderr, "brokente: unknown --break %q; known: %s\n", mode, strings.Join(names(), ", "))
		os.Exit(2)
	}
	if err := run(mode, hastoreURL, listen); err != nil {
		fmt.Fprintln(os.Stderr, "brokente:", err)
		os.Exit(1)
	}
}

func names() []string {
	var out []string
	for n := range breaks {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func run(mode, hastoreURL, listen string) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := &http.Client{Transport: transport.New(transport.Config{})}
	observer, err := component.NewLeaderObserver([]string{hastoreURL}, client, log)
	if err != nil {
		return err
	}
	b := &breaker{mode: mode, client: client, jobs: map[string]uint64{}}
	cfg := component.TaskExecutorConfig{
		TaskExecutor: taskexecutor.Config{
			Slots: 2, Store: b.observer(observer), HTTPClient: client, Invokables: invokable.Suite(), Logger: log,
			ClientOptions: b.clientOptions(),
		},
		HandlerOptions: b.handlerOptions(),
	}
	cfg.Endpoint.Listen = listen
	te, err := component.NewTaskExecutor(cfg)
	if err != nil {
		return err
	}
	b.self = te.URL()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return te.Run(ctx)
}
