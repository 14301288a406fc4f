package endpoint

import (
	"context"
	"slices"
)

// SetCluster puts cluster beside e as the endpoint of the cluster
// protocol, so that a process serves two surfaces: e keeps the services
// that its Config.PublicServices names (the public API), with health,
// reflection and what Handle serves; every other service that Mount is
// given (and its SetServing) goes to cluster, which has health and
// reflection of its own. Run then serves both and Close closes both;
// ClusterURL reports cluster's URL. Call it before Mount; it panics after
// Run has started.
func (e *Endpoint) SetCluster(cluster *Endpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		panic("endpoint: SetCluster after Run")
	}
	e.cluster = cluster
}

// ClusterURL returns the base URL at which the process serves the
// cluster protocol: that of the endpoint given to SetCluster, or else
// URL.
func (e *Endpoint) ClusterURL() string {
	if c := e.clusterEndpoint(); c != nil {
		return c.URL()
	}
	return e.URL()
}

func (e *Endpoint) clusterEndpoint() *Endpoint {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cluster
}

// routed returns the endpoint that serves service: the cluster endpoint
// for a service that is not public, when there is one; else e.
func (e *Endpoint) routed(service string) *Endpoint {
	if c := e.clusterEndpoint(); c != nil && !slices.Contains(e.cfg.PublicServices, service) {
		return c
	}
	return e
}

// runCluster runs the cluster endpoint, if any, until ctx ends; its
// result arrives on the returned channel (nil without one).
func (e *Endpoint) runCluster(ctx context.Context) <-chan error {
	c := e.clusterEndpoint()
	if c == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return done
}

// closeCluster closes the cluster endpoint's listener, if any.
func (e *Endpoint) closeCluster() error {
	if c := e.clusterEndpoint(); c != nil {
		return c.Close()
	}
	return nil
}
