package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jobplane/jobplane/server/internal/cli"
)

// jobplane --version prints the build and the contract it serves, and
// exits 0.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runMain([]string{"--version"}, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	if code != 0 || !strings.Contains(out.String(), "jobplane version ") || !strings.Contains(out.String(), "contract "+contractVersion) {
		t.Fatalf("jobplane --version = %d, %q (stderr %q); want 0 and the version with its contract", code, out.String(), errOut.String())
	}
}
