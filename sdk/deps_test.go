package sdk_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// banned are the module and package prefixes that what users link must
// not reach: the server, its store backend and its telemetry exporters.
var banned = []string{
	"github.com/jobplane/jobplane/server",
	"github.com/jobplane/jobplane/internal",
	"go.etcd.io/",
	"go.uber.org/zap",
	"go.opentelemetry.io/otel/exporters",
	"go.opentelemetry.io/otel/sdk",
	"github.com/prometheus/",
	"google.golang.org/grpc",
}

func isBanned(path string) bool {
	for _, b := range banned {
		if strings.HasPrefix(path, b) {
			return true
		}
	}
	return false
}

// goCommand runs the go command outside the repository's workspace, as a
// user's program that requires the SDK module sees it.
func goCommand(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// The SDK's packages link none of the server's code or dependencies: a
// program that talks to a cluster, or runs a worker, stays small.
func TestSDKPackagesDoNotLinkTheServer(t *testing.T) {
	deps := strings.Fields(string(goCommand(t, "list", "-deps", "./...")))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages; the check would prove nothing", len(deps))
	}
	for _, dep := range deps {
		if isBanned(dep) {
			t.Errorf("an SDK package links %s", dep)
		}
	}
}

// The SDK module requires none of the server's modules, directly or
// through another: `go get` of the SDK resolves connect, protobuf and the
// few modules the SDK itself needs, not etcd.
func TestSDKModuleRequiresNoServerModule(t *testing.T) {
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal(goCommand(t, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	if len(mod.Require) < 3 {
		t.Fatalf("go.mod lists %d requirements; the check would prove nothing", len(mod.Require))
	}
	for _, r := range mod.Require {
		if isBanned(r.Path) {
			t.Errorf("go.mod requires %s", r.Path)
		}
	}
	graph := strings.Fields(string(goCommand(t, "list", "-m", "all")))
	for _, m := range graph {
		if isBanned(m) {
			t.Errorf("the module graph holds %s", m)
		}
	}
}
