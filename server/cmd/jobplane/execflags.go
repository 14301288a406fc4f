package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// execFlags say where, as whom and with what environment a TaskExecutor's
// exec tasks run (only with -allow-exec): taskexecutor.ExecConfig.
type execFlags struct {
	dir      string
	keepDirs bool
	passEnv  string
	uid, gid int
}

func (e *execFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.dir, "exec-dir", "", "the root of exec tasks' working directories, one created fresh per attempt (default: jobplane-exec-<TaskExecutor id> in the OS temp directory, removed when the TaskExecutor stops)")
	fs.BoolVar(&e.keepDirs, "exec-keep-dirs", false, "keep each exec attempt's working directory when the attempt ends (default: removed)")
	fs.StringVar(&e.passEnv, "exec-env", "", "comma-separated names of this process's environment variables that exec commands get too (default: none; commands get only PATH="+taskexecutor.ExecPath+", HOME, TMPDIR, JOBPLANE_* and their task's env)")
	fs.IntVar(&e.uid, "exec-uid", -1, "run exec commands as this user id (needs -exec-gid, and a TaskExecutor running as root on a Unix system; default: this process's user)")
	fs.IntVar(&e.gid, "exec-gid", -1, "run exec commands as this group id, without supplementary groups (needs -exec-uid)")
}

// config is the flags' taskexecutor.ExecConfig.
func (e *execFlags) config() taskexecutor.ExecConfig {
	c := taskexecutor.ExecConfig{Dir: e.dir, KeepDirs: e.keepDirs}
	for name := range strings.SplitSeq(e.passEnv, ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.PassEnv = append(c.PassEnv, name)
		}
	}
	if e.uid >= 0 && e.gid >= 0 {
		c.Credential = &taskexecutor.ExecCredential{UID: uint32(e.uid), GID: uint32(e.gid)}
	}
	return c
}

// validate refuses exec settings this process cannot honour, before
// anything starts; they are checked only when exec is allowed.
func (t *taskExecutorFlags) validate() error {
	e := t.exec
	if err := t.output.validate(); err != nil {
		return err
	}
	switch {
	case (e.uid >= 0) != (e.gid >= 0):
		return errors.New("-exec-uid and -exec-gid go together")
	case e.uid > 1<<32-2 || e.gid > 1<<32-2:
		return errors.New("-exec-uid and -exec-gid must be below 4294967295")
	case !t.allowExec:
		return nil
	}
	return e.config().Validate()
}
