package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

var _ hastore.Checkpoints = (*Store)(nil)

// Key layout of checkpoints and savepoints (see the package doc).
func (s *Store) checkpointPrefix(jobID string) string { return s.prefix + "checkpoints/" + jobID + "/" }
func (s *Store) lastIDKey(jobID string) string        { return s.checkpointPrefix(jobID) + "last" }
func (s *Store) checkpointIDsPrefix(jobID string) string {
	return s.checkpointPrefix(jobID) + "ids/"
}
func (s *Store) checkpointKey(jobID string, id uint64) string {
	return s.checkpointIDsPrefix(jobID) + idKey(id)
}
func (s *Store) savepointPrefix() string       { return s.prefix + "savepoints/" }
func (s *Store) savepointKey(id string) string { return s.savepointPrefix() + id }

// idKey is a checkpoint id as its key's last part: 20 digits, so that
// keys sort as ids do.
func idKey(id uint64) string { return fmt.Sprintf("%020d", id) }

// valueBatch is how many checkpoints or savepoints a listing reads at a
// time: each may be as large as a plan.
const valueBatch = 16

// checkpointState is what a checkpoint or savepoint write decides on: the
// job's last id and its key's mod revision (0: absent), read in one
// consistent read, and what else the write read with them.
type checkpointState struct {
	last    uint64
	lastRev int64
	ids     []uint64         // the stored checkpoints' ids, in order
	other   *mvccpb.KeyValue // the checkpoint or savepoint of the write's id, if stored
}

// readCheckpointState reads the job's last id and, in the same read, the
// stored checkpoint ids (if ids) and the key other.
func (s *Store) readCheckpointState(ctx context.Context, jobID string, ids bool, other string) (checkpointState, error) {
	ops := []clientv3.Op{clientv3.OpGet(s.lastIDKey(jobID)), clientv3.OpGet(other)}
	if ids {
		ops = append(ops, clientv3.OpGet(s.checkpointIDsPrefix(jobID), clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	resp, err := s.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return checkpointState{}, unavailable(ctx, err)
	}
	var st checkpointState
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if st.last, err = strconv.ParseUint(string(kvs[0].Value), 10, 64); err != nil {
			return checkpointState{}, fmt.Errorf("hastore: decode last checkpoint id of job %s: %w", jobID, err)
		}
		st.lastRev = kvs[0].ModRevision
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		st.other = kvs[0]
	}
	if ids {
		pfx := s.checkpointIDsPrefix(jobID)
		for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
			id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), pfx), 10, 64)
			if err != nil {
				return checkpointState{}, fmt.Errorf("hastore: decode checkpoint key %q: %w", kv.Key, err)
			}
			st.ids = append(st.ids, id)
		}
	}
	return st, nil
}

// jobWrite runs ops fenced by f in one transaction, only if the job has
// no result entry (else a *hastore.JobTerminalError), has a plan (else
// hastore.ErrPlanNotFound) and every guard holds (else conflict: what
// the caller decided on changed, and it reads again). It claims the
// job's checkpoint prefix, which the job's plan deletes remove.
func (s *Store) jobWrite(ctx context.Context, f hastore.Fence, jobID string, guards []clientv3.Cmp, ops ...clientv3.Op) (conflict bool, err error) {
	resultKey := s.resultKey(jobID)
	guarded := clientv3.OpTxn(guards, ops, nil)
	withPlan := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.planKey(jobID)), ">", 0)}, []clientv3.Op{guarded}, nil)
	resp, err := s.fencedClaiming(ctx, f, []string{s.checkpointPrefix(jobID)}, clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(resultKey), "=", 0)},
		[]clientv3.Op{withPlan},
		[]clientv3.Op{clientv3.OpGet(resultKey)}))
	if err != nil {
		return false, err
	}
	outer := resp.Responses[0].GetResponseTxn()
	if !outer.GetSucceeded() {
		return false, jobTerminal(jobID, outer.GetResponses()[0])
	}
	plan := outer.GetResponses()[0].GetResponseTxn()
	if !plan.GetSucceeded() {
		return false, hastore.ErrPlanNotFound
	}
	return !plan.GetResponses()[0].GetResponseTxn().GetSucceeded(), nil
}

// AddCheckpoint implements hastore.Checkpoints. It reads the job's last
// id and stored ids, decides, and writes in one fenced transaction that
// holds only if the job's last id is unchanged since (every add changes
// it, so the stored ids are too), retrying on a change. The refusal of
// an id not above the last goes through the same transaction, so that a
// stale token is refused as stale first.
func (s *Store) AddCheckpoint(ctx context.Context, f hastore.Fence, cp *hastorev1.CompletedCheckpoint, retain int) ([]uint64, error) {
	data, err := hastore.Canonical(cp)
	if err != nil {
		return nil, fmt.Errorf("hastore: encode checkpoint: %w", err)
	}
	if err := hastore.ValidateCheckpointWrite(f, cp, retain, len(data), s.maxPlan); err != nil {
		return nil, err
	}
	jobID, id := cp.GetJobId(), cp.GetCheckpointId()
	for {
		st, err := s.readCheckpointState(ctx, jobID, true, s.checkpointKey(jobID, id))
		if err != nil {
			return nil, err
		}
		var (
			ops      []clientv3.Op
			subsumed []uint64
			outcome  error
		)
		switch {
		case id > st.last:
			ops = []clientv3.Op{
				clientv3.OpPut(s.checkpointKey(jobID, id), string(data)),
				clientv3.OpPut(s.lastIDKey(jobID), strconv.FormatUint(id, 10)),
			}
			// Every stored id is below the last, so below id: the oldest
			// go first.
			if n := len(st.ids) + 1 - max(retain, 1); n > 0 {
				subsumed = st.ids[:n]
			}
			for _, old := range subsumed {
				ops = append(ops, clientv3.OpDelete(s.checkpointKey(jobID, old)))
			}
		case !sameValue(st.other, cp, new(hastorev1.CompletedCheckpoint)):
			outcome = &hastore.CheckpointIDError{JobID: jobID, ID: id, Last: st.last}
		}
		guards := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.lastIDKey(jobID)), "=", st.lastRev)}
		conflict, err := s.jobWrite(ctx, f, jobID, guards, ops...)
		if err != nil {
			return nil, err
		}
		if !conflict {
			return subsumed, outcome
		}
	}
}

// sameValue reports whether kv holds the same message (hastore.Same) as
// want, decoding it into into; false if kv is nil or does not decode.
func sameValue(kv *mvccpb.KeyValue, want, into proto.Message) bool {
	if kv == nil || proto.Unmarshal(kv.Value, into) != nil {
		return false
	}
	return hastore.Same(into, want)
}

// LatestCheckpoint implements hastore.Checkpoints: the last id and the
// greatest stored checkpoint in one consistent read.
func (s *Store) LatestCheckpoint(ctx context.Context, jobID string) (*hastorev1.CompletedCheckpoint, uint64, error) {
	if err := hastore.ValidateJobID(jobID); err != nil {
		return nil, 0, err
	}
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(s.lastIDKey(jobID)),
		clientv3.OpGet(s.checkpointIDsPrefix(jobID), clientv3.WithLastKey()...),
	).Commit()
	if err != nil {
		return nil, 0, unavailable(ctx, err)
	}
	var last uint64
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if last, err = strconv.ParseUint(string(kvs[0].Value), 10, 64); err != nil {
			return nil, 0, fmt.Errorf("hastore: decode last checkpoint id of job %s: %w", jobID, err)
		}
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, last, nil
	}
	cp := new(hastorev1.CompletedCheckpoint)
	if err := proto.Unmarshal(kvs[0].Value, cp); err != nil {
		return nil, 0, fmt.Errorf("hastore: decode checkpoint %q: %w", kvs[0].Key, err)
	}
	return cp, last, nil
}

// ListCheckpoints implements hastore.Checkpoints.
func (s *Store) ListCheckpoints(ctx context.Context, jobID string, after uint64, limit int) ([]*hastorev1.CompletedCheckpoint, error) {
	if err := hastore.ValidateCheckpointList(jobID, limit); err != nil {
		return nil, err
	}
	from := ""
	if after > 0 {
		from = idKey(after)
	}
	var (
		cps    []*hastorev1.CompletedCheckpoint
		decErr error
	)
	err := s.scanBatches(ctx, s.checkpointIDsPrefix(jobID), from, false, valueBatch, func(key string, value []byte) bool {
		cp := new(hastorev1.CompletedCheckpoint)
		if err := proto.Unmarshal(value, cp); err != nil {
			decErr = fmt.Errorf("hastore: decode checkpoint %s of job %s: %w", key, jobID, err)
			return false
		}
		cps = append(cps, cp)
		return limit == 0 || len(cps) < limit
	})
	if err != nil {
		return nil, err
	}
	return cps, decErr
}

// AddSavepoint implements hastore.Checkpoints as AddCheckpoint does, with
// the savepoint's key guarded too.
func (s *Store) AddSavepoint(ctx context.Context, f hastore.Fence, sp *hastorev1.Savepoint) error {
	data, err := hastore.Canonical(sp)
	if err != nil {
		return fmt.Errorf("hastore: encode savepoint: %w", err)
	}
	if err := hastore.ValidateSavepointWrite(f, sp, len(data), s.maxPlan); err != nil {
		return err
	}
	jobID, id, key := sp.GetJobId(), sp.GetCheckpointId(), s.savepointKey(sp.GetSavepointId())
	for {
		st, err := s.readCheckpointState(ctx, jobID, false, key)
		if err != nil {
			return err
		}
		var (
			ops     []clientv3.Op
			outcome error
			keyRev  int64
		)
		switch {
		case st.other != nil:
			keyRev = st.other.ModRevision
			if !sameValue(st.other, sp, new(hastorev1.Savepoint)) {
				outcome = hastore.ErrSavepointExists
			}
		case id > st.last:
			ops = []clientv3.Op{
				clientv3.OpPut(key, string(data)),
				clientv3.OpPut(s.lastIDKey(jobID), strconv.FormatUint(id, 10)),
			}
		default:
			outcome = &hastore.CheckpointIDError{JobID: jobID, ID: id, Last: st.last}
		}
		guards := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.lastIDKey(jobID)), "=", st.lastRev),
			clientv3.Compare(clientv3.ModRevision(key), "=", keyRev),
		}
		conflict, err := s.jobWrite(ctx, f, jobID, guards, ops...)
		if err != nil {
			return err
		}
		if !conflict {
			return outcome
		}
	}
}

// GetSavepoint implements hastore.Checkpoints.
func (s *Store) GetSavepoint(ctx context.Context, id string) (*hastorev1.Savepoint, error) {
	if err := hastore.ValidateSavepointID(id); err != nil {
		return nil, err
	}
	resp, err := s.client.Get(ctx, s.savepointKey(id))
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, hastore.ErrSavepointNotFound
	}
	sp := new(hastorev1.Savepoint)
	if err := proto.Unmarshal(resp.Kvs[0].Value, sp); err != nil {
		return nil, fmt.Errorf("hastore: decode savepoint %s: %w", id, err)
	}
	return sp, nil
}

// ListSavepoints implements hastore.Checkpoints. A listing of one job's
// savepoints reads every job's, a batch at a time: savepoints are few,
// taken by users.
func (s *Store) ListSavepoints(ctx context.Context, jobID, after string, limit int) ([]*hastorev1.Savepoint, error) {
	if err := hastore.ValidateSavepointList(jobID, after, limit); err != nil {
		return nil, err
	}
	var (
		sps    []*hastorev1.Savepoint
		decErr error
	)
	err := s.scanBatches(ctx, s.savepointPrefix(), after, false, valueBatch, func(key string, value []byte) bool {
		sp := new(hastorev1.Savepoint)
		if err := proto.Unmarshal(value, sp); err != nil {
			decErr = fmt.Errorf("hastore: decode savepoint %s: %w", key, err)
			return false
		}
		if jobID == "" || sp.GetJobId() == jobID {
			sps = append(sps, sp)
		}
		return limit == 0 || len(sps) < limit
	})
	if err != nil {
		return nil, err
	}
	return sps, decErr
}

// DeleteSavepoint implements hastore.Checkpoints: one fenced delete.
func (s *Store) DeleteSavepoint(ctx context.Context, f hastore.Fence, id string) error {
	if err := hastore.ValidateSavepointDelete(f, id); err != nil {
		return err
	}
	_, err := s.fenced(ctx, f, clientv3.OpDelete(s.savepointKey(id)))
	return err
}
