package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A user's worker program links the SDK, not the server's store: no etcd,
// no zap.
func TestNoStoreBackendLinked(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"github.com/jobplane/jobplane/sdk/worker", "github.com/jobplane/jobplane/sdk/jobgraph"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed %d packages, too few to be its dependencies", pkg, len(deps))
		}
		for _, dep := range deps {
			if strings.Contains(dep, "etcd") || strings.HasPrefix(dep, "go.uber.org/zap") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}
