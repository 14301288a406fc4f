package main

import (
	"os"
	"testing"

	"github.com/jobplane/jobplane/server/localcluster"
)

// TestMain removes the jobplane binary that localcluster built, if it
// built one ($JOBPLANE_BIN names one that make built).
func TestMain(m *testing.M) {
	os.Exit(localcluster.Main(m))
}
