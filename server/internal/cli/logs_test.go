package cli

import (
	"os"
	"strings"
	"testing"
	"time"
)

const (
	// tickerJob prints four lines, waiting after the first for the file
	// GOFILE, fails on its first attempt and finishes on the second.
	tickerJob = `name: ticker
vertices:
  - id: tick
    invokable: exec
    parallelism: 1
    config:
      argv: '["sh", "-c", "echo tick 1; while [ ! -e \"$GO\" ]; do sleep 0.05; done; for i in 2 3 4; do echo tick $i; done; test -e \"$MARK\" || { touch \"$MARK\"; exit 1; }"]'
      env: '{"MARK": "MARKFILE", "GO": "GOFILE"}'
config:
  restart_strategy: {fixed_delay: {attempts: 1, delay: 100ms}}
`
	chattyJob = `name: chatty
vertices:
  - id: talk
    invokable: exec
    parallelism: 2
    config:
      argv: '["sh", "-c", "echo started; sleep 60"]'
`
)

func TestClientLogs(t *testing.T) {
	c := startCLICluster(t)

	expect(t, "submit exec", c.run(t, "submit", "--id", "ex", example("exec.yaml")), exitOK, nil, nil)
	expect(t, "logs of one subtask", c.run(t, "logs", "ex", "--vertex", "greet", "--subtask", "1"), exitOK, []string{"hello from "}, nil)

	// A running job's subtasks, each under a header.
	expect(t, "submit chatty", c.run(t, "submit", "-d", "--id", "chatty", writeJob(t, "chatty.yaml", chattyJob)), exitOK, nil, nil)
	var r cliResult
	for deadline := time.Now().Add(60 * time.Second); ; {
		r = c.run(t, "logs", "chatty")
		if strings.Count(r.stdout, "started") == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	expect(t, "logs of every subtask", r, exitOK, []string{"==> vertex talk, subtask 0 <==\nstarted\n", "==> vertex talk, subtask 1 <==\nstarted\n"}, nil)
	expect(t, "follow needs one subtask", c.run(t, "logs", "chatty", "--follow"), exitUsage, nil, []string{"--follow follows one subtask"})
	expect(t, "unknown vertex", c.run(t, "logs", "chatty", "--vertex", "nope", "--subtask", "0"), exitUsage, nil, []string{"nope"})
	expect(t, "cancel chatty", c.run(t, "cancel", "chatty"), exitOK, nil, nil)
	expect(t, "no job", c.run(t, "logs", "no-such-job"), exitError, nil, []string{"no-such-job"})

	// --follow prints the output as it comes, on across a restart, and
	// ends with the job.
	dir := t.TempDir()
	job := writeJob(t, "ticker.yaml", strings.NewReplacer("MARKFILE", dir+"/mark", "GOFILE", dir+"/go").Replace(tickerJob))
	expect(t, "submit ticker", c.run(t, "submit", "-d", "--id", "ticker", job), exitOK, nil, nil)
	cmd := c.command("logs", "ticker", "--follow")
	out, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first attempt goes on once its first line was followed.
	if !out.waitFor("tick 1", 60*time.Second) {
		cmd.Process.Kill()
		t.Fatalf("logs --follow: no first line:\n%s", out)
	}
	if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r = cliResult{code: waitExit(t, cmd, cliTimeout)}
	r.stdout, r.stderr = out.String(), stderr.String()
	expect(t, "logs --follow", r, exitOK, []string{"tick 1\ntick 2\ntick 3\ntick 4\ntick 1\ntick 2\ntick 3\ntick 4\n"}, []string{"[vertex tick, subtask 0: attempt 1]"})
	if n := strings.Count(r.stdout, "tick 1"); n != 2 {
		t.Errorf("logs --follow printed %d first lines, want one per attempt:\n%s", n, r.stdout)
	}
	expect(t, "wait ticker", c.run(t, "wait", "ticker"), exitOK, nil, nil)
}
