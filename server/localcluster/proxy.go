package localcluster

import (
	"io"
	"net"
	"sync"
)

// Proxy is a loopback TCP proxy to one address that can cut the traffic
// it carries, as a network partition does: while cut, it accepts
// connections and reads what either side sends, but forwards nothing and
// closes nothing, so both sides see silence, not a reset. Heal forwards
// again, and closes the connections that lived through the cut (their
// streams lost bytes); their clients reconnect.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	cut     bool
	closed  bool
	conns   map[*proxyConn]struct{}
	tainted map[*proxyConn]struct{}
}

type proxyConn struct{ client, upstream net.Conn }

func (pc *proxyConn) close() {
	pc.client.Close()
	if pc.upstream != nil {
		pc.upstream.Close()
	}
}

// NewProxy listens on a free loopback port and forwards every connection
// to target (host:port). Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}, tainted: map[*proxyConn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding, in both directions, on every connection, present
// and future.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pc := range p.conns {
		p.tainted[pc] = struct{}{}
	}
}

// Heal forwards again, and closes the connections that were open while
// the proxy was cut.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for pc := range p.tainted {
		pc.close()
	}
	clear(p.tainted)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for pc := range p.conns {
		pc.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

func (p *Proxy) handle(client net.Conn) {
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	pc := &proxyConn{client: client, upstream: upstream}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.close()
		return
	}
	p.conns[pc] = struct{}{}
	if p.cut {
		p.tainted[pc] = struct{}{}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(upstream, client); pc.close() })
	wg.Go(func() { p.pipe(client, upstream); pc.close() })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, pc)
	delete(p.tainted, pc)
	p.mu.Unlock()
}

// pipe copies src to dst, dropping what it reads while the proxy is cut.
func (p *Proxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isCut() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// CutEtcd partitions the jobmanager from every etcd member (see Proxy):
// it needs ProcessClusterConfig.EtcdProxies.
func (jm *JobManagerProcess) CutEtcd() error {
	if len(jm.proxies) == 0 {
		return ErrNoProxies
	}
	for _, px := range jm.proxies {
		px.Cut()
	}
	return nil
}

// HealEtcd ends CutEtcd's partition.
func (jm *JobManagerProcess) HealEtcd() error {
	if len(jm.proxies) == 0 {
		return ErrNoProxies
	}
	for _, px := range jm.proxies {
		px.Heal()
	}
	return nil
}
