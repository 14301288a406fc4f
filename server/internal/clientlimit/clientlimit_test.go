package clientlimit_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/jobplane/jobplane/server/internal/clientlimit"
	"github.com/jobplane/jobplane/server/internal/principal"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  clientlimit.Config
		ok   bool
	}{
		{"no limits", clientlimit.Config{}, true},
		{"defaults", clientlimit.Config{MaxStreams: clientlimit.DefaultMaxStreams, SubmitRate: clientlimit.DefaultSubmitRate, SubmitBurst: clientlimit.DefaultSubmitBurst}, true},
		{"a fractional rate", clientlimit.Config{SubmitRate: 0.5, SubmitBurst: 1}, true},
		{"negative streams", clientlimit.Config{MaxStreams: -1}, false},
		{"negative rate", clientlimit.Config{SubmitRate: -1, SubmitBurst: 1}, false},
		{"a rate without a burst", clientlimit.Config{SubmitRate: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("Validate = %v, want ok %v", err, tc.ok)
			}
			if _, nerr := clientlimit.New(tc.cfg); (nerr == nil) != tc.ok {
				t.Errorf("New = %v, want ok %v", nerr, tc.ok)
			}
		})
	}
}

func TestClient(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		addr string
		want string
	}{
		{"IPv4 address", ctx, "127.0.0.1:51234", "address 127.0.0.1"},
		{"IPv6 address", ctx, "[::1]:51234", "address ::1"},
		{"address without a port", ctx, "10.0.0.7", "address 10.0.0.7"},
		{"principal over address", principal.NewContext(ctx, principal.Principal{Name: "alice", Method: "token"}), "127.0.0.1:1", "principal alice"},
		// A principal named like an address is not that address.
		{"principal named as an address", principal.NewContext(ctx, principal.Principal{Name: "127.0.0.1", Method: "token"}), "127.0.0.1:1", "principal 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientlimit.Client(tc.ctx, connect.Peer{Addr: tc.addr}); got != tc.want {
				t.Errorf("Client = %q, want %q", got, tc.want)
			}
		})
	}
}
