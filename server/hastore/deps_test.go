package hastore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The contract links no storage engine: a program that needs only the
// interfaces (the Dispatcher, the remote store's client) must not compile
// etcd or its zap logging. The backends live in packages of their own.
func TestContractImportsNoBackend(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the package's dependencies")
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"go.etcd.io/", "go.uber.org/zap"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("server/hastore depends on %s; the contract package must not import etcd or zap (put it in a backend's package)", dep)
			}
		}
	}
}
