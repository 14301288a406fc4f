package main

import (
	"errors"
	"flag"
	"path/filepath"
	"time"

	"github.com/jobplane/jobplane/sdk/taskexecutor"
)

// outputFlags say where and for how long a TaskExecutor keeps its
// attempts' output (taskexecutor.Config.OutputDir and its bounds).
type outputFlags struct {
	dir      string
	dirSet   bool // -output-dir was given, possibly empty
	maxAge   time.Duration
	maxBytes int64
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.Func("output-dir", "keep each execution attempt's output in files under this directory, where a restarted process finds it again (standalone default: <data-dir>/output with an embedded member; taskexecutor default: none; empty: in memory, 10 minutes and 512 attempts)", func(v string) error {
		o.dir, o.dirSet = v, true
		return nil
	})
	fs.DurationVar(&o.maxAge, "output-max-age", taskexecutor.DefaultOutputDiskRetention, "how long an ended attempt's output is kept in -output-dir")
	fs.Int64Var(&o.maxBytes, "output-max-bytes", taskexecutor.DefaultOutputMaxBytes, "bytes the output in -output-dir may take (a standalone's TaskExecutors share them); beyond it, the output of the attempts that ended first is removed first")
}

// validate checks the flags before anything is opened.
func (o *outputFlags) validate() error {
	switch {
	case o.maxAge <= 0:
		return errors.New("-output-max-age must be positive")
	case o.maxBytes <= 0:
		return errors.New("-output-max-bytes must be positive")
	}
	return nil
}

// defaultDir sets the directory to dataDir's "output" unless
// -output-dir was given or there is no data directory.
func (o *outputFlags) defaultDir(dataDir string) {
	if !o.dirSet && dataDir != "" {
		o.dir = filepath.Join(dataDir, "output")
	}
}
