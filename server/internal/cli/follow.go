package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk"
)

// refreshInterval is how often the live display asks for a job's subtask
// counts between its status changes (and redraws the elapsed time).
const refreshInterval = time.Second

// jobEvent is what the attached display learns of a job.
type jobEvent struct {
	summary *jobplanev1.JobSummary
	err     error
	watch   bool // from the status stream, not a refresh
	end     bool // the status stream ended
}

// follow attaches to job id until it ends, and returns the exit of its
// final status. On a terminal (with -o table) it redraws a live display;
// otherwise it writes one line per status change and per restart (-o
// table) or nothing until the end (-o json|yaml, which print the
// JobResult). An interrupt
// asks, on a terminal, whether to cancel the job or detach; without one,
// it detaches.
func (a *app) follow(ctx context.Context, client *sdk.Client, id, format string) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	isTerm, _ := a.s.terminal()
	live := isTerm && format == "table"
	interactive := live && a.s.interactive()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)

	events := make(chan jobEvent)
	send := func(ev jobEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		for s, err := range client.Watch(ctx, id) {
			if !send(jobEvent{summary: s, err: err, watch: true}) || err != nil {
				return
			}
		}
		send(jobEvent{end: true})
	}()
	if live {
		go func() {
			tick := time.NewTicker(refreshInterval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				rctx, cancel := a.requestContext(ctx)
				d, err := client.Get(rctx, id, sdk.WithSummaryView())
				cancel()
				if err == nil && !send(jobEvent{summary: d.GetSummary()}) {
					return
				}
			}
		}()
	}

	var (
		view      jobView
		screen    = &liveView{w: a.s.Out, width: func() int { _, w := a.s.terminal(); return w }}
		prompting bool
		answers   chan string
	)
	redraw := func() {
		if live && !prompting && view.cur != nil {
			screen.draw(progressLines(view.cur, time.Now()))
		}
	}
	detach := func() error {
		fmt.Fprintf(a.s.Err, "detached from job %s, which goes on (unless its config sets a client_heartbeat_timeout: then the cluster cancels it once no client waits for it); 'jobplane wait %s' follows it again, 'jobplane cancel %s' cancels it\n", id, id, id)
		return exit(exitDetached, nil)
	}
following:
	for {
		select {
		case ev := <-events:
			switch {
			case ev.err != nil:
				if prompting {
					fmt.Fprintln(a.s.Out)
				}
				return fail(ev.err, nil)
			case ev.end:
				break following
			}
			prev := view.cur
			changed := view.update(ev.summary)
			switch {
			case live:
				redraw()
			case format == "table" && ev.watch && changed:
				fmt.Fprintln(a.s.Out, statusLine(prev, view.cur))
			}
		case <-sigs:
			if !interactive {
				fmt.Fprintln(a.s.Err, "interrupted")
				return detach()
			}
			if prompting { // a second interrupt does not wait for the answer
				fmt.Fprintln(a.s.Out)
				return detach()
			}
			prompting = true
			fmt.Fprintf(a.s.Out, "\nInterrupted: [c]ancel job %s, [d]etach (it goes on), or [f]ollow on? ", id)
			if answers == nil {
				answers = readLines(a.s.In)
			}
		case answer, ok := <-answers:
			if !prompting {
				continue
			}
			prompting = false
			screen.forget()
			if !ok {
				fmt.Fprintln(a.s.Out)
				return detach()
			}
			switch strings.ToLower(strings.TrimSpace(answer)) {
			case "c", "cancel":
				rctx, cancel := a.requestContext(ctx)
				st, err := client.Cancel(rctx, id)
				cancel()
				if err != nil {
					fmt.Fprintf(a.s.Err, "could not cancel job %s: %v\n", id, err)
				} else {
					fmt.Fprintf(a.s.Out, "canceling job %s (%s)\n", id, statusName(st))
				}
			case "d", "detach":
				return detach()
			}
			redraw()
		}
	}

	rctx, cancel := a.requestContext(ctx)
	result, err := client.Wait(rctx, id)
	cancel()
	if err != nil {
		// The job ended; say how from the last summary.
		s := view.cur
		result = &jobplanev1.JobResult{JobId: id, Status: s.GetStatus(), SubmitTime: s.GetSubmitTime(), EndTime: s.GetEndTime(),
			RestartCount: s.GetRestartCount(), Failure: s.GetFailure(), Name: s.GetName()}
	}
	if prompting {
		fmt.Fprintln(a.s.Out)
		prompting = false
		screen.forget()
	}
	if live {
		view.update(&jobplanev1.JobSummary{JobId: id, Name: result.GetName(), Status: result.GetStatus(), SubmitTime: result.GetSubmitTime(),
			StatusTime: result.GetEndTime(), EndTime: result.GetEndTime(), RestartCount: result.GetRestartCount(),
			Failure: result.GetFailure(), TaskCounts: view.cur.GetTaskCounts()})
		redraw()
	}
	if format == "table" {
		fmt.Fprintln(a.s.Out, resultText(result))
	} else if err := printStructured(a.s.Out, format, result); err != nil {
		return exit(exitError, err)
	}
	if code := exitCodeOf(result.GetStatus()); code != exitOK {
		return exit(code, nil)
	}
	return nil
}

// readLines reads lines from in into the returned channel, which is
// closed at the end of the input.
func readLines(in interface{ Read([]byte) (int, error) }) chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadString('\n')
			if line != "" || err == nil {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}
