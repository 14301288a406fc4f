//go:build unix

package taskexecutor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretEnv is set in the test process's environment, which an exec
// command must not see unless passed through.
const secretEnv = "TASKEXECUTOR_TEST_SECRET"

// envScript prints what an exec command sees, one "name=value" a line.
const envScript = `echo "pwd=$(pwd -P)"; echo "home=$HOME"; echo "tmpdir=$TMPDIR"; ` +
	`echo "secret=${TASKEXECUTOR_TEST_SECRET-unset}"; echo "mine=$MINE"; echo "path=$PATH"; ` +
	`echo "job=$JOBPLANE_JOB_ID"; echo "uid=$(id -u)"; echo "gid=$(id -g)"; ` +
	`touch "$HOME/made" "$TMPDIR/made" && echo "wrote=yes"`

// runEnvTask runs envScript as an exec task of attempt under ec, and
// returns what it printed.
func runEnvTask(t *testing.T, ec ExecConfig, attempt int) map[string]string {
	t.Helper()
	argv, _ := json.Marshal([]string{"sh", "-c", envScript})
	env, _ := json.Marshal(map[string]string{"MINE": "task's own"})
	var out bytes.Buffer
	task := Task{
		JobID: "job/../1", VertexID: "v", SubtaskIndex: 2, Attempt: attempt, Subtasks: 3, Output: &out,
		Config: map[string]string{"argv": string(argv), "env": string(env)},
	}
	if err := execInvokable(DefaultCancelGrace, ec, 64<<10)(context.Background(), task); err != nil {
		t.Fatalf("exec task: %v (output %q)", err, out.String())
	}
	seen := map[string]string{}
	for line := range strings.Lines(out.String()) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		seen[k] = v
	}
	return seen
}

// An exec command runs in a directory of its own under the root, which is
// its HOME and holds its TMPDIR, sees its task's env but not the
// TaskExecutor's environment, and the directory is gone once the attempt
// ended; two attempts get two directories.
func TestExecRunsInAFreshDirectoryWithACleanEnvironment(t *testing.T) {
	t.Setenv(secretEnv, "the TaskExecutor's secret")
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ec := ExecConfig{Dir: root}
	first := runEnvTask(t, ec, 0)
	second := runEnvTask(t, ec, 1)
	for i, seen := range []map[string]string{first, second} {
		dir := seen["pwd"]
		if filepath.Dir(dir) != root {
			t.Errorf("attempt %d ran in %q, want a directory right under %q", i, dir, root)
		}
		if base := filepath.Base(dir); strings.Contains(base, "/") || !strings.HasPrefix(base, "job_.._1-v-2-") {
			t.Errorf("attempt %d's directory is named %q, want it after job, vertex, subtask and attempt", i, base)
		}
		if seen["home"] != dir || seen["tmpdir"] != filepath.Join(dir, "tmp") {
			t.Errorf("attempt %d: HOME %q, TMPDIR %q; want %q and its tmp", i, seen["home"], seen["tmpdir"], dir)
		}
		if seen["wrote"] != "yes" {
			t.Errorf("attempt %d could not write into its HOME and TMPDIR", i)
		}
		if seen["secret"] != "unset" {
			t.Errorf("attempt %d saw the TaskExecutor's %s: %q", i, secretEnv, seen["secret"])
		}
		if seen["mine"] != "task's own" || seen["job"] != "job/../1" {
			t.Errorf("attempt %d: MINE %q, JOBPLANE_JOB_ID %q; want the task's env and its identity", i, seen["mine"], seen["job"])
		}
		if seen["path"] != ExecPath {
			t.Errorf("attempt %d: PATH %q, want %q", i, seen["path"], ExecPath)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("attempt %d's directory is still there after the attempt: %v", i, err)
		}
	}
	if first["pwd"] == second["pwd"] {
		t.Errorf("two attempts shared the directory %q", first["pwd"])
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("the root holds %d entries after the attempts, want none", len(left))
	}
}

// PassEnv passes the TaskExecutor's variables through, and KeepDirs
// leaves the directory behind.
func TestExecPassEnvAndKeepDirs(t *testing.T) {
	t.Setenv(secretEnv, "passed")
	root := t.TempDir()
	seen := runEnvTask(t, ExecConfig{Dir: root, PassEnv: []string{secretEnv, "TASKEXECUTOR_TEST_UNSET"}, KeepDirs: true}, 0)
	if seen["secret"] != "passed" {
		t.Errorf("%s = %q, want it passed through", secretEnv, seen["secret"])
	}
	if _, err := os.Stat(filepath.Join(seen["home"], "made")); err != nil {
		t.Errorf("KeepDirs: the attempt's file is gone: %v", err)
	}
}

// A task that leaves a directory it may not write to behind still has
// its directory removed.
func TestExecRemovesAnUnwritableDirectory(t *testing.T) {
	root := t.TempDir()
	argv, _ := json.Marshal([]string{"sh", "-c", `mkdir -p locked/deep && touch locked/deep/f && chmod 000 locked/deep locked`})
	task := Task{JobID: "j", VertexID: "v", Config: map[string]string{"argv": string(argv)}}
	if err := execInvokable(DefaultCancelGrace, ExecConfig{Dir: root}, 64<<10)(context.Background(), task); err != nil {
		t.Fatalf("exec task: %v", err)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("the root holds %v after the attempt, want nothing", left)
	}
}

// Credential runs the command as another user, which owns its directory;
// only a TaskExecutor running as root can do that.
func TestExecCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root; this test runs as uid", os.Geteuid())
	}
	const nobody = 65534
	// The command's user must reach its directory by its absolute path:
	// t.TempDir's directories are 0700, and opened here.
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(tmp, "root")
	ec := ExecConfig{Dir: root, Credential: &ExecCredential{UID: nobody, GID: nobody}}
	if err := validConfig(ec).Validate(); err != nil {
		t.Fatalf("Validate as root: %v", err)
	}
	seen := runEnvTask(t, ec, 0)
	if seen["uid"] != "65534" || seen["gid"] != "65534" {
		t.Errorf("the command ran as uid %q gid %q, want 65534", seen["uid"], seen["gid"])
	}
	if seen["wrote"] != "yes" {
		t.Errorf("the command could not write into its own directory")
	}
	if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("the root: %v, %v; want mode 0711", fi.Mode(), err)
	}
}

// A process that cannot switch users refuses a credential up front.
func TestExecCredentialRefused(t *testing.T) {
	err := checkCredential(&ExecCredential{UID: 1, GID: 1}, 1000)
	if err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("checkCredential as uid 1000: %v, want a refusal that says root is needed", err)
	}
	if os.Geteuid() != 0 {
		cfg := validConfig(ExecConfig{Credential: &ExecCredential{}})
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate of a credential as uid %d: nil, want a refusal", os.Geteuid())
		}
	}
	cfg := validConfig(ExecConfig{PassEnv: []string{"A=B"}})
	if err := cfg.Validate(); err == nil {
		t.Errorf("Validate of PassEnv %q: nil, want a refusal", "A=B")
	}
}

// validConfig is a Config that passes Validate but for its exec settings;
// nothing here runs it.
func validConfig(ec ExecConfig) Config {
	return Config{Address: "http://127.0.0.1:1", Store: noLeader{}, HTTPClient: http.DefaultClient, AllowExec: true, Exec: ec}
}
