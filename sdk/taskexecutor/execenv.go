package taskexecutor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ExecConfig says where and as whom the built-in exec runs its commands,
// and what environment they get. It matters only when Config.AllowExec
// is set: exec then runs whatever any submitter that may reach the
// cluster's API asks for, and these settings bound what such a command
// sees of the TaskExecutor, not what it may do as its user.
type ExecConfig struct {
	// Dir is the root under which every exec attempt gets a working
	// directory of its own, created fresh as the attempt starts (named
	// after the job, vertex, subtask and attempt, with a random suffix)
	// and removed when the attempt ends. The command starts there, with
	// HOME set to it and TMPDIR to its tmp subdirectory. Default: a
	// directory under os.TempDir() unique to the TaskExecutor
	// (jobplane-exec-<id>), created with mode 0700 (0711 when Credential
	// is set, so that the command's user may reach its own directory) and
	// removed when Run ends if it is empty. A Dir given here is created
	// when missing, never removed, and it and every directory above it
	// must let Credential's user pass (mode o+x).
	Dir string
	// KeepDirs leaves each attempt's working directory in place when the
	// attempt ends, for debugging. Default: false (removed).
	KeepDirs bool
	// PassEnv names variables of the TaskExecutor's own environment that
	// commands get too. Default: none: a command's environment is only
	// PATH (ExecPath), HOME, TMPDIR, the JOBPLANE_* variables of its
	// attempt, and the task's own "env", which overrides all of them.
	PassEnv []string
	// Credential, if set, runs commands as this user and group (with no
	// supplementary groups). Config.Validate refuses it where processes
	// cannot be started as another user: on platforms without
	// SysProcAttr.Credential, and in a process that is not root.
	// Default: nil, the TaskExecutor's own user.
	Credential *ExecCredential
}

// ExecCredential is the numeric user and group an exec command runs as.
type ExecCredential struct {
	// UID is the user id.
	UID uint32
	// GID is the group id.
	GID uint32
}

// Validate checks the exec settings against what this process can do: it
// refuses a Credential where processes cannot be started as another user
// (not root, or no such support on the platform), and a PassEnv entry that
// is no variable name.
func (c ExecConfig) Validate() error {
	if c.Credential != nil {
		if err := checkCredential(c.Credential, os.Geteuid()); err != nil {
			return err
		}
	}
	for _, name := range c.PassEnv {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("taskexecutor: exec: %q is not an environment variable's name", name)
		}
	}
	return nil
}

// dirPerm is the mode of a root directory this package creates.
func (c ExecConfig) dirPerm() fs.FileMode {
	if c.Credential != nil {
		return 0o711
	}
	return 0o700
}

// attemptDir creates the fresh working directory of t's attempt, and its
// tmp subdirectory, owned by the command's user.
func (c ExecConfig) attemptDir(t Task) (string, error) {
	root := c.Dir
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, c.dirPerm()); err != nil {
		return "", err
	}
	name := strings.Join([]string{
		pathSafe(t.JobID), pathSafe(t.VertexID), strconv.Itoa(t.SubtaskIndex), strconv.Itoa(t.Attempt), "",
	}, "-")
	dir, err := os.MkdirTemp(root, name)
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "tmp")
	err = os.Mkdir(tmp, 0o700)
	if err == nil && c.Credential != nil {
		uid, gid := int(c.Credential.UID), int(c.Credential.GID)
		err = errors.Join(os.Lchown(dir, uid, gid), os.Lchown(tmp, uid, gid))
	}
	if err != nil {
		_ = removeDir(dir)
		return "", err
	}
	return dir, nil
}

// environ is the environment of t's command running in dir: the minimal
// base, the variables passed through, the attempt's identity, and the
// task's env, later entries overriding earlier ones (exec.Cmd keeps the
// last value of a duplicate name).
func (c ExecConfig) environ(t Task, dir string, taskEnv map[string]string) []string {
	tmp := filepath.Join(dir, "tmp")
	env := baseEnv(dir, tmp)
	for _, name := range c.PassEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env,
		"JOBPLANE_JOB_ID="+t.JobID,
		"JOBPLANE_VERTEX_ID="+t.VertexID,
		"JOBPLANE_SUBTASK_INDEX="+strconv.Itoa(t.SubtaskIndex),
		"JOBPLANE_SUBTASKS="+strconv.Itoa(t.Subtasks),
		"JOBPLANE_ATTEMPT="+strconv.Itoa(t.Attempt),
	)
	for k, v := range taskEnv {
		env = append(env, k+"="+v)
	}
	return env
}

// pathSafe turns an id into a file name part: letters, digits, '.', '_'
// and '-' stay, anything else becomes '_', and at most 64 bytes are kept.
// Names may collide; the random suffix of attemptDir keeps directories
// apart.
func pathSafe(id string) string {
	b := []byte(id)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, ch := range b {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9', ch == '_', ch == '-':
		case ch == '.' && i > 0:
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// removeDir removes an attempt's directory, even where its command left
// subdirectories it may not be written to: those are made writable first.
func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
