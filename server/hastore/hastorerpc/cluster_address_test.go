package hastorerpc_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
)

// A leader's cluster address crosses HAStoreService as its own field
// (CampaignRequest, ConfirmLeadershipRequest, LeaderInfo) and is kept
// with its address by the store behind it.
func TestClusterAddressOverTheWire(t *testing.T) {
	srv := startServer(t)
	c := hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: newHTTPClient(t, h2c), BaseURL: srv.url(), Logger: quietLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := c.OpenSession(ctx, hastore.SessionConfig{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.WithoutCancel(ctx))
	l, err := sess.Campaign(ctx, election.JobManager, election.JoinAddresses("https://host1:8443", "https://10.0.0.11:9443"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Leader(ctx, election.JobManager)
	if err != nil || info.Address != "https://host1:8443" || info.ClusterAddress != "https://10.0.0.11:9443" || info.Token != l.Token() {
		t.Fatalf("leader after campaign = %+v, %v", info, err)
	}
	if err := l.Confirm(ctx, election.JoinAddresses("https://host1:8443", "https://10.0.0.11:9444")); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Leader(ctx, election.JobManager); err != nil || info.ClusterAddress != "https://10.0.0.11:9444" {
		t.Errorf("leader after confirm = %+v, %v", info, err)
	}
	// A leader that publishes one address has no cluster address.
	if err := l.Confirm(ctx, "https://host1:8443"); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Leader(ctx, election.JobManager); err != nil || info.ClusterAddress != "" || info.Cluster() != "https://host1:8443" {
		t.Errorf("leader with one address = %+v, %v", info, err)
	}
}

// An address with a space (the separator of the stored value) is
// refused INVALID_ARGUMENT, naming the field.
func TestAddressWithSpaceRefused(t *testing.T) {
	srv := startServer(t)
	rpc := hastorev1connect.NewHAStoreServiceClient(newHTTPClient(t, h2c), srv.url())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open, err := rpc.OpenSession(ctx, &hastorev1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*hastorev1.CampaignRequest{
		{Election: "jobmanager", SessionId: open.GetSessionId(), Address: "http://a:1 http://b:2"},
		{Election: "jobmanager", SessionId: open.GetSessionId(), Address: "http://a:1", ClusterAddress: "http://b:2 x"},
	} {
		if _, err := rpc.Campaign(ctx, req); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Campaign(%q, %q) = %v, want INVALID_ARGUMENT", req.GetAddress(), req.GetClusterAddress(), err)
		}
	}
}
