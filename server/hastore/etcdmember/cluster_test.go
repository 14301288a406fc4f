package etcdmember_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

func TestParsePeers(t *testing.T) {
	got, err := etcdmember.ParsePeers("a=http://10.0.0.1:2380, b=http://host-b:2380")
	if err != nil {
		t.Fatal(err)
	}
	if want := []etcdmember.Peer{{"a", "http://10.0.0.1:2380"}, {"b", "http://host-b:2380"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParsePeers = %v, want %v", got, want)
	}
	for _, bad := range []string{
		"a", "=http://h:1", "a=", "a=http://h:1,a=http://h:2", "a=http://h:1,b=http://h:1",
		"a=ftp://h:2380", "a=http://h:0", "a=https://h", "a=h:2380",
	} {
		if _, err := etcdmember.ParsePeers(bad); err == nil {
			t.Errorf("ParsePeers(%q) succeeded, want an error", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	peers := []etcdmember.Peer{{"a", "http://10.0.0.1:2380"}, {"b", "http://10.0.0.2:2380"}}
	for _, tc := range []struct {
		name string
		cfg  etcdmember.Config
		want string // in the error; "" for none
	}{
		{"single member", etcdmember.Config{Dir: "d"}, ""},
		{"member of a cluster", etcdmember.Config{Dir: "d", Name: "a", Peers: peers}, ""},
		{"any peer address", etcdmember.Config{Dir: "d", Name: "a", Peers: peers, PeerAddr: "0.0.0.0:2380", ClientAddr: "10.0.0.1:2379"}, ""},
		{"joining", etcdmember.Config{Dir: "d", Name: "b", Peers: peers[1:], Join: []string{"http://10.0.0.1:2379"}}, ""},
		{"no own entry", etcdmember.Config{Dir: "d", Name: "c", Peers: peers}, `no entry for this member's name "c"`},
		{"default name not in peers", etcdmember.Config{Dir: "d", Peers: peers}, `"jobplane"`},
		{"join without a peer URL", etcdmember.Config{Dir: "d", Name: "a", Join: []string{"http://10.0.0.1:2379"}}, "no entry"},
		{"bad join URL", etcdmember.Config{Dir: "d", Name: "a", Peers: peers, Join: []string{"10.0.0.1"}}, "join URL"},
		{"duplicate peers", etcdmember.Config{Dir: "d", Name: "a", Peers: append(peers, peers[0])}, "twice"},
		{"short election timeout", etcdmember.Config{Dir: "d", HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond}, "5 heartbeat"},
		{"cluster timings overridden", etcdmember.Config{Dir: "d", Name: "a", Peers: peers, HeartbeatInterval: 50 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond}, ""},
		{"bad address", etcdmember.Config{Dir: "d", ClientAddr: "nohostport"}, "nohostport"},
		{"no directory", etcdmember.Config{}, "directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
