package etcdstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// The test binary doubles as a writer process for the crash test: with
// this variable set to a data directory, it embeds a member there and
// writes plans until it is killed, printing "ack N" after each write the
// store acknowledged.
const crashChildEnv = "JOBPLANE_HASTORE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	goleak.VerifyTestMain(m,
		// A leader transfer between embedded members (leaderplace_test.go)
		// leaves keep-alive connections of etcd's peer transport (its
		// HTTP client and the peers' HTTP servers) open past the
		// members' Close; nothing of this package makes HTTP calls.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	)
}

func crashChild(dir string) int {
	first, _ := strconv.Atoi(os.Getenv("JOBPLANE_CRASH_FIRST"))
	ctx := context.Background()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	sess, err := store.OpenSession(ctx, hastore.SessionConfig{TTL: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		return 1
	}
	// The killed run's leadership is ended at once, rather than waited out
	// with its lease, so that this run is granted at once.
	if info, err := store.Leader(ctx, election.JobManager); err == nil && !info.Token.IsZero() {
		_ = store.Resign(ctx, hastore.Fence{Election: election.JobManager, Token: info.Token})
	}
	l, err := sess.Campaign(ctx, election.JobManager, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "campaign:", err)
		return 1
	}
	for i := first; ; i++ {
		if err := store.PutExecutionPlan(ctx, l.Fence(), testPlan(fmt.Sprintf("k%06d", i))); err != nil {
			fmt.Fprintln(os.Stderr, "put:", err)
			return 1
		}
		fmt.Printf("ack %d\n", i)
	}
}

// Every write the store acknowledged survives SIGKILL of its process,
// over many kill/restart cycles on the same directory.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	const cycles = 20
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	deadline := time.Now().Add(3 * time.Minute)
	var acked []int
	next := 0
	for cycle := range cycles {
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: only %d cycles within the time bound", seed, cycle)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("JOBPLANE_CRASH_FIRST=%d", next))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 1 + rng.IntN(40)
		lines := bufio.NewScanner(stdout)
		got := 0
		timer := time.AfterFunc(time.Until(deadline), func() { cmd.Process.Kill() })
		for got < killAfter && lines.Scan() {
			var n int
			if _, err := fmt.Sscanf(lines.Text(), "ack %d", &n); err != nil {
				continue
			}
			acked = append(acked, n)
			next = n + 1
			got++
		}
		// Kill mid-stream: the child is writing its next plan right now.
		cmd.Process.Signal(syscall.SIGKILL)
		// Acks printed before the kill landed count too.
		for lines.Scan() {
			var n int
			if _, err := fmt.Sscanf(lines.Text(), "ack %d", &n); err == nil {
				acked = append(acked, n)
				next = n + 1
			}
		}
		cmd.Wait()
		timer.Stop()
		if got == 0 {
			t.Fatalf("seed %d cycle %d: the writer acknowledged nothing; stderr:\n%s", seed, cycle, stderr.String())
		}
	}

	// Reopen the directory and find every acknowledged write.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ids, err := store.ListExecutionPlans(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	for _, n := range acked {
		if id := fmt.Sprintf("k%06d", n); !have[id] {
			t.Errorf("seed %d: acknowledged write %s lost", seed, id)
		}
	}
	t.Logf("%d cycles, %d acknowledged writes, all found", cycles, len(acked))
}
