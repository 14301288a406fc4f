package localcluster

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves a line echo on loopback until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// A cut proxy forwards nothing and closes nothing; healed, it closes the
// connections that lived through the cut and forwards on new ones.
func TestProxy(t *testing.T) {
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		return r.ReadString('\n')
	}
	if got, err := roundTrip(c, r, 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	if got, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("through the cut: %q, %v; want a timeout", got, err)
	}
	p.Heal()
	if got, err := roundTrip(c, r, 10*time.Second); err == nil {
		t.Fatalf("on a connection that lived through the cut: %q, want it closed", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), 10*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
