package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Peer is one member of an embedded etcd cluster as the initial cluster
// names it: the member's name and the URL its peers reach it at.
type Peer struct {
	// Name is the member's name, unique in the cluster.
	Name string
	// URL is the member's peer URL, such as "http://10.0.0.1:2380".
	URL string
}

// ParsePeers parses an initial cluster in etcd's notation,
// "name1=http://host1:2380,name2=http://host2:2380", as
// --etcd-peers takes it. An empty string is no peers.
func ParsePeers(s string) ([]Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var peers []Peer
	for _, entry := range strings.Split(s, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" || u == "" {
			return nil, fmt.Errorf("hastore: peer %q: want name=URL", entry)
		}
		peers = append(peers, Peer{Name: name, URL: u})
	}
	if err := validatePeers(peers); err != nil {
		return nil, err
	}
	return peers, nil
}

// validatePeers checks that names are unique and URLs are http or https URLs with
// a host and a fixed port: the members of a cluster must find each other.
func validatePeers(peers []Peer) error {
	names := make(map[string]bool, len(peers))
	urls := make(map[string]bool, len(peers))
	for _, p := range peers {
		if p.Name == "" {
			return fmt.Errorf("hastore: peer %q has no name", p.URL)
		}
		if names[p.Name] {
			return fmt.Errorf("hastore: peer name %q appears twice", p.Name)
		}
		names[p.Name] = true
		if err := validatePeerURL(p.URL); err != nil {
			return fmt.Errorf("hastore: peer %s: %w", p.Name, err)
		}
		if urls[p.URL] {
			return fmt.Errorf("hastore: peer URL %q appears twice", p.URL)
		}
		urls[p.URL] = true
	}
	return nil
}

func validatePeerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL %q: want http://host:port, or https://host:port with peer TLS", s)
	}
	_, port, err := net.SplitHostPort(u.Host)
	if err != nil || port == "0" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("URL %q: want http(s)://host:port with a fixed port", s)
	}
	return nil
}

// validateClientURLs checks the client URLs of running members that a new
// member joins through.
func validateClientURLs(urls []string) error {
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("hastore: join URL %q: %w", s, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("hastore: join URL %q: want http://host:port", s)
		}
	}
	return nil
}

// initialCluster renders peers in etcd's notation.
func initialCluster(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.Name + "=" + p.URL
	}
	return strings.Join(parts, ",")
}

// hasMemberData reports whether dir already holds an etcd member (its
// write-ahead log): such a member restarts with its data and ignores
// how a new member would bootstrap or join.
func hasMemberData(dir string) bool {
	entries, err := os.ReadDir(filepath.Join(dir, "member", "wal"))
	return err == nil && len(entries) > 0
}

// joinCluster adds a member named name with peerURL to the running cluster
// at the client URLs join, and returns the initial cluster the new member
// starts with (every member's name and peer URLs, as etcd knows them).
//
// A member that was added before but never started (its process died
// between the addition and the start) is found by its peer URL and
// started as that member. A started member with the same name, or with
// the same peer URL, is an error: a dead member must be removed first.
func joinCluster(ctx context.Context, cfg Config, name, peerURL string) (string, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Join,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zapToSlog(cfg.Logger),
	})
	if err != nil {
		return "", fmt.Errorf("hastore: join %v: %w", cfg.Join, err)
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.MemberList(lctx)
	if err != nil {
		return "", fmt.Errorf("hastore: join %v: list members: %w", cfg.Join, err)
	}
	var (
		members []*etcdserverpb.Member
		id      uint64
	)
	for _, m := range list.Members {
		hasURL := false
		for _, u := range m.PeerURLs {
			hasURL = hasURL || u == peerURL
		}
		switch {
		case hasURL && m.Name == "":
			// Added, never started: this member's earlier attempt.
			members, id = list.Members, m.ID
		case hasURL || m.Name == name:
			return "", fmt.Errorf("hastore: join %v: member %q (%x, peer URLs %v) is already in the cluster; "+
				"if it is dead, remove it first (jobplane etcd-member remove %s)", cfg.Join, m.Name, m.ID, m.PeerURLs, m.Name)
		}
	}
	if members == nil {
		resp, err := addMember(ctx, c, cfg, name, peerURL)
		if err != nil {
			return "", err
		}
		members, id = resp.Members, resp.Member.ID
		cfg.Logger.Info("etcd member added to the cluster", "name", name, "id", fmt.Sprintf("%x", id), "peer_url", peerURL)
	}
	var peers []string
	for _, m := range members {
		n := m.Name
		if m.ID == id {
			n = name
		}
		for _, u := range m.PeerURLs {
			peers = append(peers, n+"="+u)
		}
	}
	return strings.Join(peers, ","), nil
}

// addMember adds the member with MemberAdd. etcd refuses a member while
// one of the started members is not connected to the leader, or was
// connected only for the last few seconds (a member just restarted): the
// addition is retried while that lasts, up to cfg.StartTimeout.
func addMember(ctx context.Context, c *clientv3.Client, cfg Config, name, peerURL string) (*clientv3.MemberAddResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := c.MemberAdd(actx, []string{peerURL})
		acancel()
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return nil, fmt.Errorf("hastore: join %v: add member %s=%s: %w", cfg.Join, name, peerURL, err)
		}
		cfg.Logger.Info("etcd cluster not ready for a new member; retrying", "join", cfg.Join, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("hastore: join %v: add member %s=%s: %w (a member more needs every started member "+
				"connected, and would leave no quorum while members are dead: remove dead members first)", cfg.Join, name, peerURL, err)
		case <-time.After(time.Second):
		}
	}
}
