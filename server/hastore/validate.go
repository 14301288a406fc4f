package hastore

import (
	"fmt"
	"strings"
	"time"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/sdk/election"
)

// Election names the store accepts.
const (
	// MaxJobIDLength is the longest job id accepted.
	MaxJobIDLength = 64
)

// DefaultMaxPlanBytes is the default limit on an encoded execution plan:
// the contract's 1 MiB, unless a store is configured otherwise.
const DefaultMaxPlanBytes = 1 << 20

// JobIDOfElection returns the job id of a job election, and false for any
// other name.
func JobIDOfElection(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, election.JobPrefix)
	return id, ok && ValidJobID(id)
}

// ValidJobID reports whether id is a well-formed job id: 1 to 64
// characters from [A-Za-z0-9_-].
func ValidJobID(id string) bool {
	if len(id) == 0 || len(id) > MaxJobIDLength {
		return false
	}
	for _, c := range []byte(id) {
		if !isIDChar(c) {
			return false
		}
	}
	return true
}

func isIDChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// ValidElection reports whether name is an election the store accepts.
func ValidElection(name string) bool {
	if name == election.JobManager {
		return true
	}
	_, ok := JobIDOfElection(name)
	return ok
}

func (v *validation) election(field, name string) {
	if !ValidElection(name) {
		v.add(field, fmt.Sprintf("unknown election %q: want %q or %q", name, election.JobManager, election.JobPrefix+"<job_id>"))
	}
}

func (v *validation) jobID(field, id string) {
	if !ValidJobID(id) {
		v.add(field, fmt.Sprintf("job id %q: want 1 to %d characters from [A-Za-z0-9_-]", id, MaxJobIDLength))
	}
}

func (v *validation) sessionID(field, id string) {
	if len(id) == 0 || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool { return r > 0x7f || !isIDChar(byte(r)) }) >= 0 {
		v.add(field, fmt.Sprintf("session id %q: want 1 to 64 characters from [A-Za-z0-9_-]", id))
	}
}

func (v *validation) fence(field string, f Fence) {
	v.election(field+".election", f.Election)
	v.sessionID(field+".token.session_id", f.Token.SessionID)
	if f.Token.Epoch == 0 {
		v.add(field+".token.epoch", "must be positive")
	}
}

// dataFence checks the fence of a plan or result write: well formed, and
// of the jobmanager election, the only one whose token covers plans and
// results.
func (v *validation) dataFence(field string, f Fence) {
	v.fence(field, f)
	if f.Election != election.JobManager && ValidElection(f.Election) {
		v.add(field+".election", fmt.Sprintf("%q: plans and results are written only by the leader of %q; a job election's token covers only its own leader entry", f.Election, election.JobManager))
	}
}

// ValidateFence checks that f is well formed.
func ValidateFence(f Fence) error {
	var v validation
	v.fence("fence", f)
	return v.err()
}

// ValidateElection checks that name is an election the store accepts.
func ValidateElection(name string) error {
	var v validation
	v.election("election", name)
	return v.err()
}

// ValidateJobID checks that id is a well-formed job id.
func ValidateJobID(id string) error {
	var v validation
	v.jobID("job_id", id)
	return v.err()
}

// ValidateSessionConfig checks that cfg can open a session.
func ValidateSessionConfig(cfg SessionConfig) error {
	var v validation
	if cfg.TTL <= 0 {
		v.add("ttl", "must be positive")
	} else if cfg.TTL > MaxSessionTTL {
		v.add("ttl", fmt.Sprintf("must be at most %v", MaxSessionTTL))
	}
	return v.err()
}

// MaxSessionTTL is the longest session TTL accepted.
const MaxSessionTTL = time.Hour

// ValidateCampaign checks a campaign's election and address.
func ValidateCampaign(election, address string) error {
	var v validation
	v.election("election", election)
	if len(address) > maxAddressLength {
		v.add("address", fmt.Sprintf("longer than %d bytes", maxAddressLength))
	}
	return v.err()
}

const maxAddressLength = 1024

// ValidateConfirm checks a ConfirmLeadership's fence and address.
func ValidateConfirm(f Fence, address string) error {
	var v validation
	v.fence("fence", f)
	if address == "" {
		v.add("address", "required")
	} else if len(address) > maxAddressLength {
		v.add("address", fmt.Sprintf("longer than %d bytes", maxAddressLength))
	}
	return v.err()
}

// ValidatePlanWrite checks a PutExecutionPlan's fence and plan, whose
// encoding must not exceed maxBytes.
func ValidatePlanWrite(f Fence, plan *hastorev1.ExecutionPlan, size, maxBytes int) error {
	var v validation
	v.dataFence("fence", f)
	if plan == nil {
		v.add("plan", "required")
		return v.err()
	}
	v.jobID("plan.job_id", plan.GetJobId())
	if plan.GetJobGraph() == nil {
		v.add("plan.job_graph", "required")
	}
	v.canonical("plan", plan.ProtoReflect())
	if size > maxBytes {
		v.add("plan", fmt.Sprintf("encoded plan is %d bytes, over the limit of %d", size, maxBytes))
	}
	return v.err()
}

// ValidateResultWrite checks a CreateDirtyJobResult's fence and result.
func ValidateResultWrite(f Fence, result *jobplanev1.JobResult) error {
	var v validation
	v.dataFence("fence", f)
	if result == nil {
		v.add("result", "required")
		return v.err()
	}
	v.jobID("result.job_id", result.GetJobId())
	switch result.GetStatus() {
	case jobplanev1.JobStatus_JOB_STATUS_FINISHED, jobplanev1.JobStatus_JOB_STATUS_FAILED, jobplanev1.JobStatus_JOB_STATUS_CANCELED:
	default:
		v.add("result.status", fmt.Sprintf("%v is not globally terminal", result.GetStatus()))
	}
	v.canonical("result", result.ProtoReflect())
	return v.err()
}

// ValidateJobWrite checks a fenced plan or result write that names a job
// by id.
func ValidateJobWrite(f Fence, jobID string) error {
	var v validation
	v.dataFence("fence", f)
	v.jobID("job_id", jobID)
	return v.err()
}

// MaxRunIDLength, MaxCancelRequestIDLength and MaxCancelReasonLength
// bound a run id, and a cancel request's id and reason, in bytes.
const (
	MaxRunIDLength           = 128
	MaxCancelRequestIDLength = 128
	MaxCancelReasonLength    = 1024
)

// ValidateCancellation checks the bounds of a cancel request's record
// (nil is valid), naming its fields under field.
func ValidateCancellation(field string, c *jobplanev1.Cancellation) error {
	var v validation
	v.cancellation(field, c)
	return v.err()
}

func (v *validation) cancellation(field string, c *jobplanev1.Cancellation) {
	if len(c.GetRequestId()) > MaxCancelRequestIDLength {
		v.add(field+".request_id", fmt.Sprintf("longer than %d bytes", MaxCancelRequestIDLength))
	}
	if len(c.GetReason()) > MaxCancelReasonLength {
		v.add(field+".reason", fmt.Sprintf("longer than %d bytes", MaxCancelReasonLength))
	}
}

// ValidateCancelWrite checks a RequestCancel's fence, job id and record.
func ValidateCancelWrite(f Fence, jobID string, c *jobplanev1.Cancellation) error {
	var v validation
	v.dataFence("fence", f)
	v.jobID("job_id", jobID)
	v.cancellation("cancellation", c)
	return v.err()
}

// ValidateList checks a listing's page arguments.
func ValidateList(after string, limit int) error {
	var v validation
	if after != "" {
		v.jobID("page_token", after)
	}
	if limit < 0 {
		v.add("page_size", "must not be negative")
	}
	return v.err()
}

// ValidatePublishedAddresses checks the address and cluster address of a
// leader as they arrive apart (HAStoreService's Campaign and
// ConfirmLeadership), before they are joined into the one value a store
// keeps (election.JoinAddresses): neither may hold a space, which
// separates them there.
func ValidatePublishedAddresses(address, cluster string) error {
	var v validation
	if strings.ContainsAny(address, " \t\r\n") {
		v.add("address", "holds white space")
	}
	if strings.ContainsAny(cluster, " \t\r\n") {
		v.add("cluster_address", "holds white space")
	}
	return v.err()
}
