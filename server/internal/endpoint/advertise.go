package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// ErrAdvertiseRequired is returned by Config.Validate (and so by Listen)
// for a listen address on every interface without Config.Advertise: the
// bound address ("0.0.0.0:8080", "[::]:8080") names no host that others
// can reach, and the machine's host name is not a safe guess (it may
// resolve to a loopback address, or not at all, where others look it up),
// so the process refuses to publish either.
var ErrAdvertiseRequired = errors.New("endpoint: the listen address is unspecified (every interface), which no one can reach: an advertised URL is required")

// ParseAdvertise checks an advertised base URL and returns it in the form
// the endpoint publishes: the scheme, "://", the host and the port, without
// a trailing slash. It accepts "http://" and "https://" (for a
// TLS-terminating proxy in front of the endpoint) URLs with a host and an
// explicit port, and refuses anything else: a path other than "/", a
// query, a fragment, user information, or an unspecified host such as
// 0.0.0.0.
func ParseAdvertise(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("endpoint: advertised URL %q: %w", raw, err)
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("endpoint: advertised URL %q %s (want a base URL such as http://host1:8080)", raw, why)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must start with http:// or https://")
	case u.Opaque != "" || u.Host == "":
		return bad("has no host")
	case u.User != nil:
		return bad("must not carry user information")
	case u.Path != "" && u.Path != "/":
		return bad("must not have a path")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("must not have a query")
	case u.Fragment != "":
		return bad("must not have a fragment")
	}
	if u.Hostname() == "" {
		return bad("has no host")
	}
	if unspecified(u.Hostname()) {
		return bad("names no reachable host (0.0.0.0 and :: mean every interface)")
	}
	if n, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || n == 0 {
		return bad("must name its port (1 to 65535)")
	}
	return u.Scheme + "://" + u.Host, nil
}

// unspecified reports whether a listen host means every interface.
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
