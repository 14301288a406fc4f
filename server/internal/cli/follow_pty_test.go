//go:build !windows

package cli

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyRun is a client verb running on a pseudo-terminal, as in a user's
// shell: its output is read as it comes.
type ptyRun struct {
	cmd  *exec.Cmd
	tty  *os.File
	out  *syncBuffer
	read chan struct{} // closed when the terminal's output ends
}

// startInPTY starts `jobplane --server URL args...` on a new 100x30
// pseudo-terminal.
func (c *cliCluster) startInPTY(t *testing.T, args ...string) *ptyRun {
	t.Helper()
	cmd := c.command(args...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatalf("start on a pty: %v", err)
	}
	r := &ptyRun{cmd: cmd, tty: tty, out: &syncBuffer{}, read: make(chan struct{})}
	go func() {
		defer close(r.read)
		_, err := io.Copy(r.out, tty)
		var pathErr *os.PathError
		if err != nil && !errors.As(err, &pathErr) { // EIO once the child is gone
			t.Logf("reading the pty: %v", err)
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		tty.Close()
		<-r.read
	})
	return r
}

// wait waits for the verb's exit code and for the rest of its output.
func (r *ptyRun) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	code := waitExit(t, r.cmd, within)
	select {
	case <-r.read:
	case <-time.After(5 * time.Second):
	}
	return code
}

// lastDraw is what the live display drew last before the result line:
// the text after the last redraw's clear.
func lastDraw(out string) string {
	if i := strings.LastIndex(out, "\x1b[J"); i >= 0 {
		return out[i:]
	}
	return ""
}

// On a terminal, submit redraws the live display in place and ends with
// the job's final status; Ctrl-C asks whether to cancel or detach, and
// "c" cancels the job.
func TestClientProgressInPTY(t *testing.T) {
	c := startCLICluster(t)

	t.Run("redraws to the end", func(t *testing.T) {
		r := c.startInPTY(t, "submit", "--id", "tty-pipeline", example("pipeline.yaml"))
		code := r.wait(t, cliTimeout)
		out := r.out.String()
		if code != exitOK {
			t.Fatalf("exit code %d, want 0; output:\n%q", code, out)
		}
		if redraws := strings.Count(out, "\x1b[J"); redraws < 2 {
			t.Errorf("%d draws, want a redraw:\n%q", redraws, out)
		}
		if !strings.Contains(out, "\x1b[3A") {
			t.Errorf("no cursor-up over the 3-line display:\n%q", out)
		}
		if sgr := regexp.MustCompile("\x1b\\[[0-9;]*m").FindString(out); sgr != "" {
			t.Errorf("color or style sequence %q in the display", sgr)
		}
		last := lastDraw(out)
		for _, want := range []string{"job tty-pipeline (pipeline)\r\nstatus: FINISHED   elapsed: ", "subtasks: 5 finished (5 in all)", "job tty-pipeline FINISHED after"} {
			if !strings.Contains(last, want) {
				t.Errorf("last draw lacks %q:\n%q", want, last)
			}
		}
	})

	t.Run("Ctrl-C then cancel", func(t *testing.T) {
		r := c.startInPTY(t, "submit", "--id", "tty-cancel", writeJob(t, "sleep.yaml", sleepJob))
		if !r.out.waitFor("status: RUNNING", 60*time.Second) {
			t.Fatalf("no RUNNING:\n%q", r.out.String())
		}
		if _, err := r.tty.Write([]byte{0x03}); err != nil { // Ctrl-C: the terminal sends SIGINT
			t.Fatal(err)
		}
		if !r.out.waitFor("[c]ancel job tty-cancel, [d]etach", 30*time.Second) {
			t.Fatalf("no prompt after Ctrl-C:\n%q", r.out.String())
		}
		if _, err := r.tty.Write([]byte("c\n")); err != nil {
			t.Fatal(err)
		}
		code := r.wait(t, cliTimeout)
		out := r.out.String()
		if code != exitJobCanceled {
			t.Errorf("exit code %d, want %d:\n%q", code, exitJobCanceled, out)
		}
		for _, want := range []string{"canceling job tty-cancel", "job tty-cancel CANCELED"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%q", want, out)
			}
		}
		if st := c.listJobs(t)["tty-cancel"].GetStatus(); st.String() != "JOB_STATUS_CANCELED" {
			t.Errorf("job status after cancel = %v", st)
		}
	})
}
