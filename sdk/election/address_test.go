package election_test

import (
	"testing"

	"github.com/jobplane/jobplane/sdk/election"
)

// A leader's address and cluster address travel through a store as one
// value and come back apart; a record without a cluster address (one
// listener, or an older writer) serves both from its address.
func TestAddresses(t *testing.T) {
	for _, tc := range []struct {
		address, cluster string
		published        string
		wantCluster      string // Leader.Cluster() after the round trip
	}{
		{"https://host1:8443", "https://10.0.0.11:9443", "https://host1:8443 https://10.0.0.11:9443", "https://10.0.0.11:9443"},
		{"http://127.0.0.1:8080", "", "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"", "", "", ""},
	} {
		published := election.JoinAddresses(tc.address, tc.cluster)
		if published != tc.published {
			t.Errorf("JoinAddresses(%q, %q) = %q, want %q", tc.address, tc.cluster, published, tc.published)
		}
		var l election.Leader
		l.Address, l.ClusterAddress = election.SplitAddresses(published)
		if l.Address != tc.address || l.Cluster() != tc.wantCluster {
			t.Errorf("SplitAddresses(%q) = %q, %q; want %q and cluster %q", published, l.Address, l.ClusterAddress, tc.address, tc.wantCluster)
		}
	}
}
