package main

import (
	"errors"
	"flag"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/clientlimit"
	jobdispatcher "github.com/jobplane/jobplane/server/internal/dispatcher"
)

// limitFlags bound what clients of the public API may hold and do, per
// client and for the whole cluster (docs/operations.md, "Limits").
type limitFlags struct {
	maxStreams         int
	submitRate         float64
	submitBurst        int
	maxJobs            int
	maxClusterSubtasks int
	admissionWindow    int
	options            []connect.HandlerOption // built by validate
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&l.maxStreams, "max-streams-per-client", clientlimit.DefaultMaxStreams,
		"streams (WatchJob, and any other server stream of the public API) one client may hold open at once; one more gets RESOURCE_EXHAUSTED (TOO_MANY_STREAMS); 0: no limit. "+
			"A client is its authenticated principal, or its network address")
	fs.Float64Var(&l.submitRate, "submit-rate", clientlimit.DefaultSubmitRate,
		"job submissions per second one client may make, sustained (resubmissions count); faster ones get RESOURCE_EXHAUSTED (SUBMIT_RATE_EXCEEDED) with the delay to retry after; 0: no limit")
	fs.IntVar(&l.submitBurst, "submit-burst", clientlimit.DefaultSubmitBurst, "job submissions one client may make at once, above -submit-rate")
	fs.IntVar(&l.maxJobs, "max-jobs", 0, "live jobs (submitted and not yet ended) the cluster may have; a new job over it gets RESOURCE_EXHAUSTED (TOO_MANY_JOBS); 0: no limit")
	fs.IntVar(&l.maxClusterSubtasks, "max-cluster-subtasks", 0, "subtasks the cluster's live jobs may have in all; a new job that would go over it gets RESOURCE_EXHAUSTED (TOO_MANY_SUBTASKS); 0: no limit")
	fs.IntVar(&l.admissionWindow, "admission-window", jobdispatcher.DefaultAdmissionWindow,
		"jobs launched at once that wait for their first slots (each with its leadership and JobMaster); later jobs wait, in order and at a few bytes each, until one of those deploys or ends; 0: no window")
}

// validate checks the flags and builds the public API's handler options
// that enforce the per-client limits.
func (l *limitFlags) validate() error {
	switch {
	case l.maxStreams < 0:
		return errors.New("-max-streams-per-client must not be negative")
	case l.submitRate < 0:
		return errors.New("-submit-rate must not be negative")
	case l.submitRate > 0 && l.submitBurst < 1:
		return errors.New("-submit-burst must be at least 1")
	case l.maxJobs < 0:
		return errors.New("-max-jobs must not be negative")
	case l.maxClusterSubtasks < 0:
		return errors.New("-max-cluster-subtasks must not be negative")
	case l.admissionWindow < 0:
		return errors.New("-admission-window must not be negative")
	}
	lim, err := clientlimit.New(clientlimit.Config{MaxStreams: l.maxStreams, SubmitRate: l.submitRate, SubmitBurst: l.submitBurst})
	if err != nil {
		return err
	}
	l.options = []connect.HandlerOption{connect.WithInterceptors(lim)}
	return nil
}

// window is the admission window as the server's configuration takes it:
// zero is the default there, and no window is negative.
func (l *limitFlags) window() int {
	if l.admissionWindow == 0 {
		return -1
	}
	return l.admissionWindow
}
