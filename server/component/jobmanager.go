package component

import (
	"context"

	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
	"github.com/jobplane/jobplane/server/internal/webui"
)

// NewJobManager builds a JobManager of cfg that serves on ep, and mounts
// its services there: its address and cluster address are ep's, and so
// are the request and response limits that GetClusterOverview reports,
// whatever cfg holds. The dashboard is served beside them, under
// /ui/, with the leader's public API passed on under /ui/leader/ for a
// standby's page. Run it with its Run, beside ep's.
func NewJobManager(ep *endpoint.Endpoint, cfg jobmanager.Config) (*jobmanager.JobManager, error) {
	cfg.Address, cfg.ClusterAddress = ep.URL(), ep.ClusterURL()
	cfg.MaxRequestBytes, cfg.MaxResponseBytes = ep.MaxRequestBytes(), ep.MaxResponseBytes()
	jm, err := jobmanager.New(cfg)
	if err != nil {
		return nil, err
	}
	jm.Mount(ep)
	// The dashboard, beside the public API it calls (GET / leads to it).
	ep.Handle("GET "+webui.Path, webui.Handler())
	ep.Handle("GET /{$}", webui.Redirect())
	leader := func(ctx context.Context) (string, error) {
		info, err := cfg.Store.Leader(ctx, election.JobManager)
		return info.Address, err
	}
	ep.Handle("POST "+webui.LeaderPath, webui.LeaderProxy(leader, cfg.HTTPClient))
	return jm, nil
}
