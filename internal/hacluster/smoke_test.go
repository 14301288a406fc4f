package hacluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobplane/jobplane/internal/hacluster"
	"github.com/jobplane/jobplane/sdk"
)

func TestSmoke(t *testing.T) {
	start := time.Now()
	if _, _, err := hacluster.Binaries(); err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(start))
	start = time.Now()
	c := hacluster.New(t, hacluster.Config{})
	t.Logf("started in %v; ttl %v", time.Since(start), hacluster.SessionTTL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Submit(ctx, hacluster.SleepJob("a", 2, time.Hour), sdk.WithJobID("a")); err != nil {
		t.Fatal(err)
	}
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitRunning(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ivs, err := c.Attempts()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(ivs)
}
