package etcdmember_test

import (
	"testing"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// Peer TLS goes with https:// peer URLs, and needs all three files.
func TestPeerTLSConfig(t *testing.T) {
	files := etcdmember.PeerTLS{CertFile: "c.pem", KeyFile: "k.pem", CAFile: "ca.pem"}
	for _, tc := range []struct {
		name string
		url  string
		tls  etcdmember.PeerTLS
		ok   bool
	}{
		{"plain", "http://127.0.0.1:2380", etcdmember.PeerTLS{}, true},
		{"tls", "https://127.0.0.1:2380", files, true},
		{"https without tls", "https://127.0.0.1:2380", etcdmember.PeerTLS{}, false},
		{"http with tls", "http://127.0.0.1:2380", files, false},
		{"no ca", "https://127.0.0.1:2380", etcdmember.PeerTLS{CertFile: "c.pem", KeyFile: "k.pem"}, false},
	} {
		cfg := etcdmember.Config{Dir: t.TempDir(), Name: "a", Peers: []etcdmember.Peer{{Name: "a", URL: tc.url}}, PeerTLS: tc.tls}
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
