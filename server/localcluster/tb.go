package localcluster

import "os"

// TB is the part of testing.TB that the package's test helpers (New,
// NewProcessCluster, NewStandalone, Build, FakeClock.Next and the
// Standalone's job helpers) use; *testing.T and *testing.B satisfy it.
// The package does not import testing, so that programs that are no
// tests (the conformance runner, the bench) use its processes without
// linking the test framework.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Failed() bool
	Logf(format string, args ...any)
}

// M is the part of testing.M that Main uses; *testing.M satisfies it.
type M interface {
	Run() int
}

// LongEnv names the environment variable that asks for the long versions
// of the process tests: `make test-long` sets it to 1. `make test` runs
// their smoke versions, which check the same promises on fewer cases,
// cycles or seconds.
const LongEnv = "JOBPLANE_TEST_LONG"

// Long reports whether LongEnv asks for the long versions of the tests.
func Long() bool { return os.Getenv(LongEnv) == "1" }
