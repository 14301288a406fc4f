package main

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobplanev1 "github.com/jobplane/jobplane/gen/jobplane/v1"
	"github.com/jobplane/jobplane/gen/jobplane/v1/jobplanev1connect"
)

// GetClusterOverview advertises the timings the flags configure: a flag
// changed changes the advertised value, and the defaults are the
// documented ones.
func TestAdvertisedTimingsFollowFlags(t *testing.T) {
	d := durationpb.New
	for _, tc := range []struct {
		name  string
		flags []string
		want  *jobplanev1.ServerTimings
	}{
		{"defaults", nil, &jobplanev1.ServerTimings{
			SessionTtl: d(2 * time.Second), Takeover: d(5 * time.Second), JobRegrant: d(5 * time.Second), RevocationNotice: d(5 * time.Second),
			TaskCancel: d(5 * time.Second), SlotYield: d(5 * time.Second), StreamHeartbeat: d(10 * time.Second), WatchResumeWindow: 64,
			ResultRetention: d(0), TaskExecutorHeartbeatTimeout: d(1200 * time.Millisecond), TaskLease: d(10 * time.Second), PlanRecheck: d(20 * time.Second),
		}},
		{"changed", []string{"--session-ttl", "3s", "--heartbeat-timeout", "1900ms", "--task-lease", "7s", "--slot-yield", "2s", "--result-retention", "1h"},
			&jobplanev1.ServerTimings{
				SessionTtl: d(3 * time.Second), Takeover: d(5 * time.Second), JobRegrant: d(5 * time.Second), RevocationNotice: d(5 * time.Second),
				TaskCancel: d(5 * time.Second), SlotYield: d(2 * time.Second), StreamHeartbeat: d(10 * time.Second), WatchResumeWindow: 64,
				ResultRetention: d(time.Hour), TaskExecutorHeartbeatTimeout: d(1900 * time.Millisecond), TaskLease: d(7 * time.Second), PlanRecheck: d(20 * time.Second),
			}},
		{"no task lease, no slot yield", []string{"--task-lease", "0", "--slot-yield", "0"}, &jobplanev1.ServerTimings{
			SessionTtl: d(2 * time.Second), Takeover: d(5 * time.Second), JobRegrant: d(5 * time.Second), RevocationNotice: d(5 * time.Second),
			TaskCancel: d(5 * time.Second), SlotYield: d(0), StreamHeartbeat: d(10 * time.Second), WatchResumeWindow: 64,
			ResultRetention: d(0), TaskExecutorHeartbeatTimeout: d(1200 * time.Millisecond), TaskLease: d(0), PlanRecheck: d(20 * time.Second),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrFile := filepath.Join(t.TempDir(), "addr")
			args := append([]string{"standalone", "--listen", "127.0.0.1:0", "--listen-addr-file", addrFile, "--data-dir", t.TempDir(), "--task-executors", "0"}, tc.flags...)
			p := startJobplane(t, args...)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := jobplanev1connect.NewDispatcherServiceClient(&http.Client{Transport: tr}, "http://"+waitForFile(t, p, addrFile))
			var (
				resp *jobplanev1.GetClusterOverviewResponse
				err  error
			)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err = client.GetClusterOverview(ctx, &jobplanev1.GetClusterOverviewRequest{})
				cancel()
				if err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("GetClusterOverview: %v", err)
			}
			if !proto.Equal(resp.GetTimings(), tc.want) {
				t.Errorf("advertised timings with %v:\n got %v\nwant %v", tc.flags, resp.GetTimings(), tc.want)
			}
		})
	}
}
