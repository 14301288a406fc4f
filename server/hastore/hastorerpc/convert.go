package hastorerpc

import (
	"context"
	"errors"

	"github.com/jobplane/jobplane/sdk/election"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/server/hastore"
)

func tokenToProto(t election.Token) *jobplanev1.FencingToken {
	if t.IsZero() {
		return nil
	}
	return &jobplanev1.FencingToken{SessionId: t.SessionID, Epoch: t.Epoch}
}

func tokenFromProto(t *jobplanev1.FencingToken) election.Token {
	return election.Token{SessionID: t.GetSessionId(), Epoch: t.GetEpoch()}
}

func fenceToProto(f hastore.Fence) *jobplanev1.Fence {
	return &jobplanev1.Fence{Election: f.Election, Token: tokenToProto(f.Token)}
}

func fenceFromProto(f *jobplanev1.Fence) hastore.Fence {
	return hastore.Fence{Election: f.GetElection(), Token: tokenFromProto(f.GetToken())}
}

func leaderToProto(info election.Leader) *jobplanev1.LeaderInfo {
	return &jobplanev1.LeaderInfo{Election: info.Election, Address: info.Address, ClusterAddress: info.ClusterAddress, Token: tokenToProto(info.Token)}
}

func leaderFromProto(info *jobplanev1.LeaderInfo) election.Leader {
	return election.Leader{Election: info.GetElection(), Address: info.GetAddress(), ClusterAddress: info.GetClusterAddress(), Token: tokenFromProto(info.GetToken())}
}

// revocationReason is the wire reason for the cause of a leadership's end.
func revocationReason(cause error) hastorev1.RevocationReason {
	switch {
	case errors.Is(cause, hastore.ErrResigned):
		return hastorev1.RevocationReason_REVOCATION_REASON_RESIGNED
	case errors.Is(cause, hastore.ErrLeaderDeleted):
		return hastorev1.RevocationReason_REVOCATION_REASON_DELETED
	case errors.Is(cause, hastore.ErrSessionEnded), errors.Is(cause, context.Canceled):
		return hastorev1.RevocationReason_REVOCATION_REASON_SESSION_ENDED
	}
	return hastorev1.RevocationReason_REVOCATION_REASON_UNSPECIFIED
}

// revocationCause is the hastore cause for a wire reason.
func revocationCause(r hastorev1.RevocationReason) error {
	switch r {
	case hastorev1.RevocationReason_REVOCATION_REASON_RESIGNED:
		return hastore.ErrResigned
	case hastorev1.RevocationReason_REVOCATION_REASON_DELETED:
		return hastore.ErrLeaderDeleted
	}
	return hastore.ErrSessionEnded
}

// joinAddresses is the value a store publishes for a leader's address
// and cluster address (see election.JoinAddresses).
func joinAddresses(address, cluster string) string { return election.JoinAddresses(address, cluster) }

// splitAddresses is the inverse of joinAddresses.
func splitAddresses(published string) (address, cluster string) {
	return election.SplitAddresses(published)
}
