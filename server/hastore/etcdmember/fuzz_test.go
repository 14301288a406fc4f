package etcdmember_test

import (
	"strings"
	"testing"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// ParsePeers never panics, and what it accepts it gives back as it was
// written (names and URLs, in order), valid again.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"", "a=http://127.0.0.1:2380", "a=http://h1:2380,b=http://h2:2380", "a=http://h:2380,a=http://h:2381", "=", "a=", "a=ftp://x:1", " a = http://h:1 , b=http://[::1]:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := etcdmember.ParsePeers(s)
		if err != nil {
			return
		}
		var parts []string
		for _, p := range peers {
			if p.Name == "" || p.URL == "" || strings.ContainsAny(p.Name, ",") {
				t.Fatalf("ParsePeers(%q) accepted the peer %+v", s, p)
			}
			parts = append(parts, p.Name+"="+p.URL)
		}
		again, err := etcdmember.ParsePeers(strings.Join(parts, ","))
		if err != nil || len(again) != len(peers) {
			t.Fatalf("ParsePeers of its own result %q: %v, %v", parts, again, err)
		}
		for i := range peers {
			if again[i] != peers[i] {
				t.Fatalf("peer %d: %+v, then %+v", i, peers[i], again[i])
			}
		}
	})
}
