package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client packages link none of the server's dependencies: a program
// that only talks to a cluster, or runs a worker, stays small.
func TestClientPackagesDoNotLinkTheServer(t *testing.T) {
	pkgs := []string{
		"github.com/jobplane/jobplane/sdk",
		"github.com/jobplane/jobplane/sdk/jobgraph",
		"github.com/jobplane/jobplane/sdk/planid",
		"github.com/jobplane/jobplane/sdk/worker",
	}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages; the check would prove nothing", len(deps))
	}
	for _, dep := range deps {
		for _, banned := range []string{"go.etcd.io/", "go.uber.org/zap", "github.com/jobplane/jobplane/server/hastore"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("a client package links %s", dep)
			}
		}
	}
}
