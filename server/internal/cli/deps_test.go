package cli

import (
	"os/exec"
	"strings"
	"testing"
)

// banned are the package prefixes the client verbs must not link: the
// server and its dependencies.
var banned = []string{
	"github.com/jobplane/jobplane/server/",
	"github.com/jobplane/jobplane/internal/",
	"go.etcd.io/",
	"github.com/prometheus/",
	"google.golang.org/grpc",
}

// Package cli links none of the server's code: the client verbs use the
// SDK as any user's program does.
func TestLinksNoServerCode(t *testing.T) {
	t.Parallel()
	const self = "github.com/jobplane/jobplane/server/internal/cli"
	out, err := exec.Command("go", "list", "-deps", self).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages; the check would prove nothing", len(deps))
	}
	for _, dep := range deps {
		for _, b := range banned {
			if dep != self && strings.HasPrefix(dep, b) {
				t.Errorf("package cli links %s", dep)
			}
		}
	}
}
