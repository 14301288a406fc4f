// Package freeport hands out loopback addresses for servers that a caller
// starts in another process and tells where to listen.
//
// A port found by listening on port 0 and closing the listener comes from
// the kernel's ephemeral range, from which every outgoing connection's
// local port is drawn too: on a busy machine one may take it before the
// server binds it, and the server fails to start. The ports handed out
// here lie outside that range, so only another explicit bind can take
// them, and one process never gets the same port twice.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port handed out: below it lie the well-known and
// many registered services' ports.
const lowest = 10000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Addr returns "127.0.0.1:PORT" for a port that was free a moment ago,
// lies outside the ephemeral range, and was not returned before by this
// process. Where the ephemeral range leaves too few ports, it falls back
// to a port the kernel picks.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// Port is Addr's port.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	lo, hi := ephemeralRange()
	below := max(lo-lowest, 0) // lowest .. lo-1
	above := max(65535-hi, 0)  // hi+1 .. 65535
	if below+above < 1000 {
		return kernelPort()
	}
	for range 200 {
		p := lowest + rand.IntN(below+above)
		if p >= lo {
			p = hi + 1 + (p - lowest - below)
		}
		if given[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		_ = ln.Close()
		given[p] = true
		return p, nil
	}
	return 0, errors.New("no free loopback port outside the ephemeral range after 200 tries")
}

// ephemeralRange reads Linux's range of local ports; elsewhere it assumes
// the IANA range other systems use by default.
func ephemeralRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				return l, h
			}
		}
	}
	return 49152, 65535
}

// kernelPort is a port of the kernel's choosing, free a moment ago.
func kernelPort() (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !given[p] {
			given[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("the kernel gave only ports handed out before")
}
