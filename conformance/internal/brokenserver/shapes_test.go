package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/jobplane/jobplane/conformance/runner"
	"github.com/jobplane/jobplane/server/localcluster"
)

// TestShapesPass runs cases against servers of shapes the contract
// allows and the reference does not take by default; each case must pass.
// A runner that spoke only the Connect protocol would fail the only-grpc
// and only-grpcweb servers (refused with 415), one that called the
// cluster services at the leader's address would fail cluster-apart
// (404), and one that waited for a job's election to publish an address
// would fail job-address-unpublished (the job never seen regranted).
func TestShapesPass(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reference server behind the proxies")
	}
	jobplane, err := localcluster.JobplaneBinary()
	if err != nil {
		t.Fatal(err)
	}
	broken := build(t, t.TempDir(), "brokenserver", "github.com/jobplane/jobplane/conformance/internal/brokenserver")
	// A job run to its end through the TaskExecutors (which register with
	// the ResourceManager through the proxy), the runner's calls to the
	// JobMaster and to the ResourceManager, and a hand-written JSON call.
	calls := []string{"fencing/stale-offer-refused", "fencing/tokens/resource-manager-heartbeat", "idempotency/retry-in-another-encoding"}
	for _, tc := range []struct {
		shape, protocol string
		run             []string
	}{
		{"only-grpc", "grpc", calls},
		{"only-grpcweb", "grpcweb", calls},
		{"cluster-apart", "connect", []string{"fencing/stale-offer-refused", "fencing/stale-resource-manager-token-refused", "fencing/tokens/resource-manager-heartbeat"}},
		{"job-address-unpublished", "connect", []string{"fencing/stale-offer-refused", "persist/plan-before-address"}},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			sum, err := runner.Run(context.Background(), runner.Config{
				ServerCommand: fmt.Sprintf("%s --break %s --jobplane %s --hastore {hastore} --listen {listen} --data {data}", broken, tc.shape, jobplane),
				Features:      map[string]bool{runner.FeatureResourceManager: true, runner.FeatureFailover: true, runner.FeatureAdoption: true, runner.FeatureCheckpoints: true, runner.FeatureInvokableCheck: true},
				Protocol:      tc.protocol, Run: tc.run, Parallel: 1, Trace: true, Out: &out,
			})
			if err != nil || sum.Failed > 0 || sum.Passed != len(tc.run) {
				t.Errorf("%s over %s: %d passed, %d failed (%v); want %d passed\n%s", tc.shape, tc.protocol, sum.Passed, sum.Failed, err, len(tc.run), out.String())
			}
		})
	}
}
