package localcluster

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
