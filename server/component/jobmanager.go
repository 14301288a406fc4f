package component

import (
	"github.com/jobplane/jobplane/server/internal/endpoint"
	"github.com/jobplane/jobplane/server/internal/jobmanager"
)

// NewJobManager builds a JobManager of cfg that serves on ep, and mounts
// its services there: its address and cluster address are ep's, and so
// are the request and response limits that GetClusterOverview reports,
// whatever cfg holds. Run it with its Run, beside ep's.
func NewJobManager(ep *endpoint.Endpoint, cfg jobmanager.Config) (*jobmanager.JobManager, error) {
	cfg.Address, cfg.ClusterAddress = ep.URL(), ep.ClusterURL()
	cfg.MaxRequestBytes, cfg.MaxResponseBytes = ep.MaxRequestBytes(), ep.MaxResponseBytes()
	jm, err := jobmanager.New(cfg)
	if err != nil {
		return nil, err
	}
	jm.Mount(ep)
	return jm, nil
}
