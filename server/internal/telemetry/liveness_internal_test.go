package telemetry

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/jobplane/jobplane/gen/jobplane/cluster/v1"
	_ "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	_ "github.com/jobplane/jobplane/gen/jobplane/v1"
)

// Every liveness call of the contract, whatever its service, is neither
// traced nor timed, and every other call is: a liveness call added to a
// service (a method named for a heartbeat or a keep-alive) fails this
// test until it is left alone too.
func TestLivenessCallsAreNotTraced(t *testing.T) {
	methods := 0
	protoregistry.GlobalFiles.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(f.Package()), "jobplane.") {
			return true
		}
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				name := string(svc.Methods().Get(j).Name())
				proc := "/" + string(svc.FullName()) + "/" + name
				isLiveness := strings.Contains(name, "Heartbeat") || strings.Contains(name, "KeepAlive")
				if got := traced(context.Background(), connect.Spec{Procedure: proc}); got == isLiveness {
					t.Errorf("%s: traced = %v; want %v (liveness calls are left alone, every other call traced and timed)", proc, got, !isLiveness)
				}
				methods++
			}
		}
		return true
	})
	if methods < 50 {
		t.Fatalf("saw %d methods of the contract's services; want them all (the generated packages registered?)", methods)
	}
}
