package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrOutsideEphemeralRangeAndDistinct(t *testing.T) {
	lo, hi := ephemeralRange()
	seen := map[string]bool{}
	for range 300 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, portText, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(portText)
		if port < lowest || (port >= lo && port <= hi) || port > 65535 {
			t.Fatalf("port %d; expected one from %d up outside the ephemeral range %d-%d", port, lowest, lo, hi)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		_ = ln.Close()
	}
}
