package component

import (
	"log/slog"
	"net/http"

	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/sdk/election/electionrpc"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/internal/endpoint"
)

// ServeStore serves st on ep as HAStoreService, so that TaskExecutors and
// other processes use the store this process holds.
func ServeStore(ep *endpoint.Endpoint, st hastore.Store, log *slog.Logger) {
	ep.Mount(hastorev1connect.HAStoreServiceName, hastorerpc.NewHandler(hastorerpc.HandlerConfig{Store: st, Heartbeat: electionrpc.DefaultHeartbeat, Logger: log}).Path)
}

// RelayLeader serves, on ep, HAStoreService's ObserveLeader from the
// HAStoreService at urls: a process whose store lives in another process
// still tells the TaskExecutors that ask it where the leader is.
func RelayLeader(ep *endpoint.Endpoint, urls []string, client *http.Client, log *slog.Logger) error {
	o, err := NewLeaderObserver(urls, client, log)
	if err != nil {
		return err
	}
	relay, err := electionrpc.NewHandler(electionrpc.HandlerConfig{Observer: o, Logger: log})
	if err != nil {
		return err
	}
	ep.Mount(hastorev1connect.HAStoreServiceName, relay.Path)
	return nil
}

// ObserveIdleTimeout is how long a process following the leader over
// HAStoreService waits on a silent stream before it gives the server up
// for the next: a few of the heartbeats that jobplane's servers send.
const ObserveIdleTimeout = 5 * electionrpc.DefaultHeartbeat

// NewLeaderObserver follows elections' leaders through the HAStoreService
// at urls, called with client, moving to the next URL when one breaks or
// stays silent for ObserveIdleTimeout: the observer of a TaskExecutor
// whose store is served by other processes.
func NewLeaderObserver(urls []string, client *http.Client, log *slog.Logger) (*electionrpc.Observer, error) {
	return electionrpc.NewObserver(electionrpc.Config{
		HTTPClient: client, BaseURLs: urls, Options: endpoint.ClientOptions(),
		IdleTimeout: ObserveIdleTimeout, Logger: log,
	})
}
