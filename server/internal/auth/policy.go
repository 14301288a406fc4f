package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
	"github.com/jobplane/jobplane/server/internal/principal"
)

// Everyone, in a list of a Policy, stands for every authenticated
// principal.
const Everyone = "*"

// Actions of the public API, as a Policy grants them.
const (
	// ActionSubmit: SubmitJob.
	ActionSubmit = "submit"
	// ActionRead: GetJob, WatchJob, GetJobResult, GetTaskOutput and
	// ListCheckpoints of a job, ListJobs, ListSavepoints, ListTaskExecutors
	// and GetClusterOverview.
	ActionRead = "read"
	// ActionCancel: CancelJob, PurgeJob, ReportClientHeartbeat (the heartbeat keeps
	// an attached job alive) and TriggerSavepoint of a job, and
	// DeleteSavepoint of a savepoint of the job.
	ActionCancel = "cancel"
)

// actions maps each procedure of DispatcherService to its action; a
// procedure not in it is for admins only.
var actions = map[string]string{
	jobplanev1connect.DispatcherServiceSubmitJobProcedure:             ActionSubmit,
	jobplanev1connect.DispatcherServiceGetJobProcedure:                ActionRead,
	jobplanev1connect.DispatcherServiceWatchJobProcedure:              ActionRead,
	jobplanev1connect.DispatcherServiceGetJobResultProcedure:          ActionRead,
	jobplanev1connect.DispatcherServiceGetTaskOutputProcedure:         ActionRead,
	jobplanev1connect.DispatcherServiceListJobsProcedure:              ActionRead,
	jobplanev1connect.DispatcherServiceListTaskExecutorsProcedure:     ActionRead,
	jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure:    ActionRead,
	jobplanev1connect.DispatcherServiceCancelJobProcedure:             ActionCancel,
	jobplanev1connect.DispatcherServicePurgeJobProcedure:              ActionCancel,
	jobplanev1connect.DispatcherServiceReportClientHeartbeatProcedure: ActionCancel,
	jobplanev1connect.DispatcherServiceListCheckpointsProcedure:       ActionRead,
	jobplanev1connect.DispatcherServiceListSavepointsProcedure:        ActionRead,
	jobplanev1connect.DispatcherServiceTriggerSavepointProcedure:      ActionCancel,
	jobplanev1connect.DispatcherServiceDeleteSavepointProcedure:       ActionCancel,
}

// clusterWide are the reads about the cluster rather than its jobs, which
// submitters may make too (the CLI checks the invokables a job names
// before it submits it).
var clusterWide = map[string]bool{
	jobplanev1connect.DispatcherServiceListTaskExecutorsProcedure:  true,
	jobplanev1connect.DispatcherServiceGetClusterOverviewProcedure: true,
}

// Policy is the built-in authorization policy: lists of principal names
// (Everyone for every authenticated principal) per action. A job's owner
// (the principal that submitted it) may always read and cancel it; an
// admin may do everything, also calls this policy does not know of.
// Every other call is refused with an error wrapping principal.ErrDenied.
type Policy struct {
	// Admins may do everything.
	Admins []string `yaml:"admins"`
	// Submit may submit jobs.
	Submit []string `yaml:"submit"`
	// Read may read every job and the cluster's state (submitters may
	// read the cluster's TaskExecutors and overview too).
	Read []string `yaml:"read"`
	// Cancel may cancel every job (its owner may cancel it anyway).
	Cancel []string `yaml:"cancel"`
}

var _ principal.Authorizer = (*Policy)(nil)

// DefaultPolicy is the policy when authentication is on and no policy
// file is given: every authenticated principal may submit, and read every
// job; only a job's owner may cancel it; there is no admin.
func DefaultPolicy() *Policy {
	return &Policy{Submit: []string{Everyone}, Read: []string{Everyone}}
}

// LoadPolicy reads a policy file: YAML with the keys admins, submit,
// read and cancel, each a list of principal names or "*"; a key left out
// grants nothing. An unknown key is an error, as is a file that is not
// such YAML.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy parses the YAML of a policy file (see LoadPolicy).
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a policy (YAML with admins, submit, read and cancel lists): %w", err)
	}
	for _, l := range [][]string{p.Admins, p.Submit, p.Read, p.Cancel} {
		if slices.Contains(l, "") {
			return nil, errors.New("an empty principal name")
		}
	}
	return &p, nil
}

// Authorize implements principal.Authorizer.
func (p *Policy) Authorize(_ context.Context, r principal.Request) error {
	name := r.Principal.Name
	if name != "" && has(p.Admins, name) {
		return nil
	}
	action, known := actions[r.Procedure]
	if !known {
		return fmt.Errorf("%w: %s may not call %s (admins only)", principal.ErrDenied, name, r.Procedure)
	}
	isOwner := r.JobID != "" && r.Owner != "" && r.Owner == name
	switch action {
	case ActionSubmit:
		if has(p.Submit, name) {
			return nil
		}
		return fmt.Errorf("%w: %s may not submit jobs", principal.ErrDenied, name)
	case ActionRead:
		if isOwner || has(p.Read, name) || clusterWide[r.Procedure] && has(p.Submit, name) {
			return nil
		}
		if r.JobID == "" {
			return fmt.Errorf("%w: %s may not read the cluster's jobs", principal.ErrDenied, name)
		}
		return fmt.Errorf("%w: %s may not read job %s (its submitter, an admin and readers may)", principal.ErrDenied, name, r.JobID)
	default: // ActionCancel
		if isOwner || has(p.Cancel, name) {
			return nil
		}
		return fmt.Errorf("%w: %s may not cancel job %s (its submitter and an admin may)", principal.ErrDenied, name, r.JobID)
	}
}

// has tells whether list grants name: it names it, or holds Everyone.
func has(list []string, name string) bool {
	return slices.Contains(list, Everyone) || (name != "" && slices.Contains(list, name))
}
