package taskexecutor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Task is what an invokable gets to run one subtask.
type Task struct {
	// JobID is the job's id.
	JobID string
	// VertexID, SubtaskIndex and Attempt identify the execution attempt.
	VertexID     string
	SubtaskIndex int
	Attempt      int
	// Subtasks is the vertex's parallelism.
	Subtasks int
	// Config is the vertex's configuration, verbatim from the JobGraph.
	Config map[string]string
	// Logger writes text lines (slog's text format, from level Info on)
	// into the attempt's output, which the TaskExecutor keeps for clients
	// to read (DispatcherService.GetTaskOutput; see Config.OutputBytes for
	// how much, and for how long). Set by the TaskExecutor; an invokable
	// called otherwise must cope with nil.
	Logger *slog.Logger
	// Output receives raw bytes into the attempt's output, beside
	// Logger's lines; the built-in exec writes its command's stdout and
	// stderr there. Writes never fail, and are dropped once the attempt
	// has ended. Set by the TaskExecutor; nil otherwise.
	Output io.Writer
	// Restored is the subtask's state from the job's latest completed
	// checkpoint (or the savepoint the job restores from), which the task
	// starts from; nil when it starts afresh. RestoredFrom names that
	// checkpoint (its id) or savepoint.
	Restored     *State
	RestoredFrom string
	// OnCheckpoint registers fn to give the task's state when the job
	// checkpoints; a later call replaces it. Until a task registers one,
	// its checkpoints keep the state it was restored from. Set by the
	// TaskExecutor; nil otherwise.
	OnCheckpoint func(fn SnapshotFunc)
	// SetValue sets the value the task returns when it finishes
	// (TaskExecutionStatus.value, kept in the job's result); a later call
	// replaces it, and the bytes are copied. A value over
	// Config.MaxValueBytes fails the attempt when it finishes. A value set
	// by an attempt that fails or is canceled is dropped. Set by the
	// TaskExecutor; nil otherwise.
	SetValue func(value []byte)
	// Add adds delta to the task's accumulator name (a named counter,
	// summed over the job's subtasks in the job's result). A name that is
	// not 1 to 128 bytes of [A-Za-z0-9_.-], or more than
	// Config.MaxAccumulators names, fails the attempt when it finishes.
	// Safe for concurrent use. Set by the TaskExecutor; nil otherwise.
	Add func(name string, delta int64)
}

// Invokable runs one subtask. It returns nil when the subtask finished,
// and must return promptly once ctx is canceled (the attempt was canceled).
type Invokable func(ctx context.Context, task Task) error

// DefaultCancelGrace is how long the built-in exec gives a canceled task's
// processes between SIGTERM and SIGKILL to their process group (on Unix;
// elsewhere it only bounds the wait for the output of a killed command).
const DefaultCancelGrace = time.Second

// outputWaitDelay bounds how long an exec task waits for its output after
// its process group is gone: a process that left the group (setsid, a
// daemon) may still hold the output pipe, and the task must not wait for it.
const outputWaitDelay = time.Second

// execNotAllowed ends the message of a deployment of exec to a
// TaskExecutor that does not run it (which a cluster does only when its
// check of offered invokables was out of date).
const execNotAllowed = ": exec is offered only by TaskExecutors that run it (jobplane taskexecutor or standalone with --allow-exec, an SDK worker with worker.Config.AllowExec)"

// builtins returns the built-in invokables a TaskExecutor offers: noop,
// sleep, fail and count, and exec only when allowExec is set (running
// commands as ec says; a canceled exec task's process group gets
// cancelGrace between SIGTERM and SIGKILL). A TaskExecutor that would not
// run exec does not offer it, so that the cluster neither places exec
// subtasks there nor accepts a job that needs it when no TaskExecutor
// runs it. maxValue bounds the value file exec reads (see execInvokable).
func builtins(allowExec bool, cancelGrace time.Duration, ec ExecConfig, maxValue int) map[string]Invokable {
	inv := map[string]Invokable{
		"noop":  func(context.Context, Task) error { return nil },
		"sleep": sleepInvokable,
		"fail":  failInvokable,
		"count": countInvokable,
	}
	if allowExec {
		inv["exec"] = execInvokable(cancelGrace, ec, maxValue)
	}
	return inv
}

// configDuration reads a duration from the task's config.
func configDuration(t Task, key string, def time.Duration) (time.Duration, error) {
	v, ok := t.Config[key]
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("config %q: %w", key, err)
	}
	return d, nil
}

func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// sleepInvokable sleeps for config "duration" (default 1s), then finishes.
func sleepInvokable(ctx context.Context, t Task) error {
	d, err := configDuration(t, "duration", time.Second)
	if err != nil {
		return err
	}
	return wait(ctx, d)
}

// failInvokable waits config "delay" (default 0), then fails with config
// "message", on the attempts listed in config "attempts" of the subtasks
// listed in config "subtasks" (comma-separated numbers; default: every
// attempt, every subtask). Other attempts finish.
func failInvokable(ctx context.Context, t Task) error {
	d, err := configDuration(t, "delay", 0)
	if err != nil {
		return err
	}
	if err := wait(ctx, d); err != nil {
		return err
	}
	for key, n := range map[string]int{"attempts": t.Attempt, "subtasks": t.SubtaskIndex} {
		listed, err := configListed(t, key, n)
		if err != nil {
			return err
		}
		if !listed {
			return nil
		}
	}
	msg := t.Config["message"]
	if msg == "" {
		msg = "the fail task failed as configured"
	}
	return errors.New(msg)
}

// countInvokable counts from 0 (or from its restored state) to config
// "to" (default 100), one step each config "every" (default 100ms),
// returns its final count as its value (in decimal) and adds the steps it
// counted itself to the accumulator "count.steps", and
// keeps its count in every checkpoint, so that a restarted attempt goes
// on where the job's latest completed checkpoint left it. It fails when
// it reaches config "fail_at" (if set), on the attempts listed in config
// "attempts" (default: attempt 0 only). Its output says where it started
// and ended: "counting from N to M" and "counted to M".
func countInvokable(ctx context.Context, t Task) error {
	every, err := configDuration(t, "every", 100*time.Millisecond)
	if err != nil {
		return err
	}
	to, err := configInt(t, "to", 100)
	if err != nil {
		return err
	}
	failAt, err := configInt(t, "fail_at", -1)
	if err != nil {
		return err
	}
	failing := false
	if failAt >= 0 {
		if t.Config["attempts"] == "" {
			failing = t.Attempt == 0
		} else if failing, err = configListed(t, "attempts", t.Attempt); err != nil {
			return err
		}
	}
	var count atomic.Int64
	if st := t.Restored; st != nil {
		n, err := strconv.ParseInt(string(st.Data), 10, 64)
		if err != nil {
			return fmt.Errorf("restored state %q is no count: %w", st.Data, err)
		}
		count.Store(n)
	}
	if t.OnCheckpoint != nil {
		t.OnCheckpoint(func(context.Context, uint64) (State, error) {
			return State{Data: strconv.AppendInt(nil, count.Load(), 10)}, nil
		})
	}
	if t.Logger != nil {
		t.Logger.Info(fmt.Sprintf("counting from %d to %d", count.Load(), to), "restored_from", t.RestoredFrom)
	}
	from := count.Load()
	ticker := time.NewTicker(max(every, time.Millisecond))
	defer ticker.Stop()
	for count.Load() < int64(to) {
		if failing && count.Load() == int64(failAt) {
			return fmt.Errorf("the count task failed at %d as configured", failAt)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			count.Add(1)
		}
	}
	if t.Logger != nil {
		t.Logger.Info(fmt.Sprintf("counted to %d", count.Load()))
	}
	if t.SetValue != nil {
		t.SetValue(strconv.AppendInt(nil, count.Load(), 10))
	}
	if t.Add != nil {
		t.Add("count.steps", count.Load()-from)
	}
	return nil
}

// configInt reads an integer from the task's config.
func configInt(t Task, key string, def int) (int, error) {
	v, ok := t.Config[key]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("config %q: %w", key, err)
	}
	return n, nil
}

// configListed reports whether n is in the task's config key, a
// comma-separated list of numbers; an absent or empty key lists every n.
func configListed(t Task, key string, n int) (bool, error) {
	list := t.Config[key]
	if list == "" {
		return true, nil
	}
	var ns []int
	for _, f := range strings.Split(list, ",") {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return false, fmt.Errorf("config %q: %w", key, err)
		}
		ns = append(ns, x)
	}
	return slices.Contains(ns, n), nil
}

// execFailureTail is how much of an exec command's output ends the
// message of its failure.
const execFailureTail = 512

// execInvokable runs config "argv" (a JSON array) in a fresh working
// directory of its own under ec.Dir (removed when the attempt ends, unless
// ec.KeepDirs), with a clean environment (see ExecConfig and
// ExecConfig.environ): ExecPath, HOME and TMPDIR in that directory, the
// variables ec.PassEnv names, the attempt's identity in JOBPLANE_JOB_ID,
// JOBPLANE_VERTEX_ID, JOBPLANE_SUBTASK_INDEX, JOBPLANE_SUBTASKS and
// JOBPLANE_ATTEMPT, and config "env" (a JSON object) over all of them; as
// ec.Credential's user when it is set. argv[0], when it holds no path
// separator, is looked up in the TaskExecutor's own PATH. The command's
// stdout and stderr go to the task's Output as they come. It fails with
// the tail of the command's combined stdout and stderr when the command
// fails.
//
// Checkpoints: the command keeps its state in files of the directory
// JOBPLANE_CHECKPOINT_DIR (in its working directory): "state" (bytes kept
// in the checkpoint) or "pointer" (a URL of state it wrote elsewhere),
// each replaced whole (written aside, then renamed), as often as it likes.
// A checkpoint takes what they hold when it comes; a command that wrote
// neither keeps the state it was restored from. A restored attempt finds
// that state in "restored" (bytes) or "restored-pointer" (a URL), and
// JOBPLANE_RESTORED_FROM names its checkpoint (empty when it starts
// afresh).
//
// Value: a command that writes the file JOBPLANE_VALUE_FILE (in its
// working directory) returns what the file holds once it exits with
// status 0 as the task's value (TaskExecutionStatus.value); the file is
// read as the TaskExecutor's user, never through a symbolic link (on
// Unix), and one over maxValue bytes fails the task. A command that writes
// no such file returns no value.
//
// On Unix the command runs in a process group of its own, which gets
// SIGTERM when ctx is canceled and SIGKILL grace later, or as soon as the
// command exits; on Linux a shim also kills the group when this process
// dies (see runCommand and the package doc).
func execInvokable(grace time.Duration, ec ExecConfig, maxValue int) Invokable {
	return func(ctx context.Context, t Task) error {
		var argv []string
		if err := json.Unmarshal([]byte(t.Config["argv"]), &argv); err != nil || len(argv) == 0 {
			return fmt.Errorf("config \"argv\" must be a non-empty JSON array of strings")
		}
		env := map[string]string{}
		if raw := t.Config["env"]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &env); err != nil {
				return fmt.Errorf("config \"env\" must be a JSON object of strings: %w", err)
			}
		}
		dir, err := ec.attemptDir(t)
		if err != nil {
			return fmt.Errorf("exec: the attempt's working directory: %w", err)
		}
		if !ec.KeepDirs {
			defer func() {
				if err := removeDir(dir); err != nil && t.Logger != nil {
					t.Logger.Warn("exec: removing the attempt's working directory failed", "dir", dir, "err", err)
				}
			}()
		}
		// exec.Command resolves argv[0] against this process's PATH, as
		// before, so the shim (Linux) runs exactly the program found here.
		ckptDir, err := execCheckpointDir(t, dir, ec)
		if err != nil {
			return fmt.Errorf("exec: the attempt's checkpoint directory: %w", err)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		valueFile := filepath.Join(dir, execValueFile)
		cmd.Env = append(ec.environ(t, dir, env), "JOBPLANE_CHECKPOINT_DIR="+ckptDir, "JOBPLANE_RESTORED_FROM="+t.RestoredFrom,
			"JOBPLANE_VALUE_FILE="+valueFile)
		setCredential(cmd, ec.Credential)
		// stdout and stderr share one writer, and so one pipe, which
		// keeps their order; the tail of both ends the failure message.
		tail := newOutput(execFailureTail)
		tail.runs = 1 // takes writes until dropped
		var w io.Writer = tail
		if t.Output != nil {
			w = io.MultiWriter(t.Output, tail)
		}
		cmd.Stdout, cmd.Stderr = w, w
		if err := runCommand(ctx, cmd, grace); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: %w: %s", argv[0], err, strings.TrimSpace(string(tail.bytes())))
		}
		return readValueFile(t, valueFile, maxValue)
	}
}

// execValueFile is the name of the file in which an exec command leaves
// its value (JOBPLANE_VALUE_FILE).
const execValueFile = "jobplane-value"

// readValueFile sets t's value from the file path, if the command wrote
// it: at most max+1 bytes, so that a larger value fails the attempt
// (runTask checks the size) without being read whole.
func readValueFile(t Task, path string, max int) error {
	f, err := openNoFollow(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("exec: reading JOBPLANE_VALUE_FILE: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("exec: JOBPLANE_VALUE_FILE is not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return fmt.Errorf("exec: reading JOBPLANE_VALUE_FILE: %w", err)
	}
	if t.SetValue != nil {
		t.SetValue(data)
	}
	return nil
}

// execCheckpointDir makes the exec attempt's checkpoint directory in dir,
// writes the state the attempt was restored from into it, and registers
// the snapshot that reads the command's state files (see execInvokable).
func execCheckpointDir(t Task, dir string, ec ExecConfig) (string, error) {
	ckpt := filepath.Join(dir, "checkpoint")
	if err := os.Mkdir(ckpt, 0o700); err != nil {
		return "", err
	}
	if st := t.Restored; st != nil {
		name, data := "restored", st.Data
		if st.Pointer != "" {
			name, data = "restored-pointer", []byte(st.Pointer)
		}
		if err := os.WriteFile(filepath.Join(ckpt, name), data, 0o600); err != nil {
			return "", err
		}
	}
	if c := ec.Credential; c != nil {
		if err := os.Lchown(ckpt, int(c.UID), int(c.GID)); err != nil {
			return "", err
		}
	}
	if t.OnCheckpoint != nil {
		t.OnCheckpoint(func(context.Context, uint64) (State, error) {
			if p, err := os.ReadFile(filepath.Join(ckpt, "pointer")); err == nil {
				return State{Pointer: strings.TrimSpace(string(p))}, nil
			} else if !errors.Is(err, fs.ErrNotExist) {
				return State{}, err
			}
			data, err := os.ReadFile(filepath.Join(ckpt, "state"))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if t.Restored != nil {
					return *t.Restored, nil
				}
				return State{}, nil
			case err != nil:
				return State{}, err
			}
			return State{Data: data}, nil
		})
	}
	return ckpt, nil
}
