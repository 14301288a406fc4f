package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Election names.
const (
	// JobManager is the election of a cluster's Dispatcher and
	// ResourceManager.
	JobManager = "jobmanager"
	// JobPrefix starts the name of the election of one job's JobMaster:
	// "job/<job-id>".
	JobPrefix = "job/"
)

// Job returns the name of the election of jobID's JobMaster.
func Job(jobID string) string { return JobPrefix + jobID }

// Token identifies one leadership grant in one election: the session that
// holds it and the grant's epoch. Epochs of one election strictly increase
// with every grant, also across restarts of the store. The zero Token
// means "no grant".
type Token struct {
	// SessionID is the holding session's id.
	SessionID string
	// Epoch orders the grants of one election; a larger epoch is newer.
	Epoch uint64
}

// IsZero reports whether t is the zero Token.
func (t Token) IsZero() bool { return t == Token{} }

// String formats t for logs.
func (t Token) String() string { return fmt.Sprintf("%s@%d", t.SessionID, t.Epoch) }

// Leader is an election's current leader as the store sees it.
type Leader struct {
	// Election is the election's name.
	Election string
	// Address is the leader's published base URL; empty until published.
	Address string
	// ClusterAddress is the base URL at which the leader serves the
	// cluster protocol when it serves it apart from Address (a JobManager
	// with a cluster listener); empty when Address serves both. See
	// Cluster.
	ClusterAddress string
	// Token is the leader's grant; zero when the election has no leader.
	Token Token
}

// Cluster returns the base URL at which the cluster's components reach
// the leader: ClusterAddress, or Address when it is empty.
func (l Leader) Cluster() string {
	if l.ClusterAddress != "" {
		return l.ClusterAddress
	}
	return l.Address
}

// JoinAddresses returns the one value a leader publishes in a store
// (Campaign, ConfirmLeadership, PutExecutionPlanAndLead) for its address
// and its cluster address: address alone when cluster is empty or the
// same, else both separated by a space, which no URL holds. Stores keep
// the value as it is; SplitAddresses reads it back.
func JoinAddresses(address, cluster string) string {
	if cluster == "" || cluster == address {
		return address
	}
	return address + " " + cluster
}

// SplitAddresses is the inverse of JoinAddresses.
func SplitAddresses(published string) (address, cluster string) {
	address, cluster, _ = strings.Cut(published, " ")
	return address, cluster
}

// Observer follows an election's leader. Every hastore.Store is one; so is
// electionrpc.Observer, over HAStoreService.
type Observer interface {
	// ObserveLeader calls fn with the election's current leader and then
	// with every change (a new grant, a published address, the leader
	// gone), in order, one call at a time. It returns when ctx is done
	// (with ctx's error) or fn returns an error (with that error), and
	// fails at once for an election name the store does not accept.
	ObserveLeader(ctx context.Context, election string, fn func(Leader) error) error
}

// Reader reads an election's current leader once: the store's state at
// one moment between the call and its answer (HAStoreService.GetLeader,
// linearizable since contract 1.2). Every hastore.Store is one; so is
// electionrpc.Observer. It costs the store one read, where the first
// answer of ObserveLeader costs a read and a watch opened and closed.
type Reader interface {
	// Leader returns the election's leader; its Token is zero when there
	// is none. It fails for an election name the store does not accept.
	Leader(ctx context.Context, election string) (Leader, error)
}

// ReadLeader reads the election's leader once from o: with Leader where
// o is a Reader, else with the first answer of its ObserveLeader.
func ReadLeader(ctx context.Context, o Observer, election string) (Leader, error) {
	if r, ok := o.(Reader); ok {
		return r.Leader(ctx, election)
	}
	var first Leader
	err := o.ObserveLeader(ctx, election, func(l Leader) error {
		first = l
		return errFirstAnswer
	})
	if errors.Is(err, errFirstAnswer) {
		return first, nil
	}
	return Leader{}, err
}

// errFirstAnswer ends an observation after its first answer.
var errFirstAnswer = errors.New("election: first answer taken")
