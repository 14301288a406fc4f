package failover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobplane/jobplane/server/hastore/etcdstore"
	"github.com/jobplane/jobplane/server/localcluster"
)

// jobManagerElectionPrefix is where the jobmanagers' candidacies live:
// one key per session, named by its lease in hex, whose value is the
// jobmanager's URL; the oldest leads.
const jobManagerElectionPrefix = etcdstore.DefaultPrefix + "elections/" + "jobmanager/"

// storeEvent is one change of a key under the store's prefix.
type storeEvent struct {
	// Revision is the change's etcd revision.
	Revision int64
	// Put is true for a put, false for a delete.
	Put bool
	// Key is the changed key.
	Key string
	// Value is the put value.
	Value []byte
	// Lease is the put key's lease, 0 for none.
	Lease int64
}

// storeWatch records every change under etcdstore.DefaultPrefix from the
// revision after the one current when it was made.
type storeWatch struct {
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
	// Start is the revision the watch began after.
	Start int64

	mu     sync.Mutex
	events []storeEvent
	err    error
}

// watchStore starts recording changes under etcdstore.DefaultPrefix. It needs
// an etcd quorum to start; Close it.
func watchStore(ctx context.Context, c *localcluster.ProcessCluster) (*storeWatch, error) {
	cli, err := c.EtcdClient()
	if err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, "failover-watch-start")
	if err != nil {
		cli.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	w := &storeWatch{cli: cli, cancel: cancel, done: make(chan struct{}), Start: resp.Header.Revision}
	ch := cli.Watch(wctx, etcdstore.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(w.done)
		for wresp := range ch {
			w.mu.Lock()
			if err := wresp.Err(); err != nil && w.err == nil && !wresp.Canceled {
				w.err = err
			}
			if wresp.Canceled && wctx.Err() == nil && w.err == nil {
				w.err = fmt.Errorf("store watch canceled: %v", wresp.Err())
			}
			for _, ev := range wresp.Events {
				w.events = append(w.events, storeEvent{
					Revision: ev.Kv.ModRevision, Put: ev.Type == mvccpb.PUT,
					Key: string(ev.Kv.Key), Value: ev.Kv.Value, Lease: ev.Kv.Lease,
				})
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Events returns the changes recorded so far, in revision order.
func (w *storeWatch) Events() []storeEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]storeEvent(nil), w.events...)
}

// Close stops the watch and returns its failure, if it failed (with
// WithRequireLeader, a watch that lost its member's leader is canceled: a
// failure).
func (w *storeWatch) Close() error {
	w.cancel()
	<-w.done
	w.cli.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// candidacy is a jobmanager's candidacy in the election "jobmanager".
type candidacy struct {
	// Lease is the session's lease; the key ends in it in hex.
	Lease int64
	// URL is the jobmanager's, the key's value.
	URL string
	// CreateRevision orders the candidacies: the oldest leads.
	CreateRevision int64
}

// candidacies reads the candidacies of the election "jobmanager", oldest
// (the leader) first. It needs an etcd quorum.
func candidacies(ctx context.Context, c *localcluster.ProcessCluster) ([]candidacy, error) {
	cli, err := c.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, jobManagerElectionPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	var out []candidacy
	for _, kv := range resp.Kvs {
		id, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), jobManagerElectionPrefix), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("candidacy key %q: %w", kv.Key, err)
		}
		out = append(out, candidacy{Lease: id, URL: string(kv.Value), CreateRevision: kv.CreateRevision})
	}
	return out, nil
}

// candidacyOf returns the jobmanager's candidacy, or an error if it has
// none (or the store did not answer).
func candidacyOf(ctx context.Context, c *localcluster.ProcessCluster, jm *localcluster.JobManagerProcess) (candidacy, error) {
	all, err := candidacies(ctx, c)
	if err != nil {
		return candidacy{}, err
	}
	for _, cd := range all {
		if cd.URL == jm.URL() {
			return cd, nil
		}
	}
	return candidacy{}, errors.New(jm.Name + " has no candidacy")
}
