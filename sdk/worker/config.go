package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// Config configures a Worker. Only Server is required.
type Config struct {
	// Server is the base URL at which the cluster serves HAStoreService: a
	// `jobplane standalone` or `jobplane jobmanager` process (one that
	// embeds its store), or a `jobplane hastore` process, such as
	// "http://127.0.0.1:8080". The worker follows the ResourceManager's
	// leader there, so it keeps working across failovers. Required.
	Server string
	// Listen is the TCP address on which the worker serves
	// TaskExecutorService to the cluster's ResourceManager and JobMasters.
	// Port 0 picks a free port. Default: "127.0.0.1:0", which only a
	// cluster on the same machine can reach.
	Listen string
	// Advertise is the base URL the cluster calls the worker at. Default:
	// "http://" and the listener's address; a listener on every interface
	// (such as ":9000" or "0.0.0.0:9000") is advertised with the
	// machine's host name instead. Set it when the cluster reaches this
	// machine under another name (behind NAT, in a container).
	Advertise string
	// Slots is how many subtasks the worker runs at once. Default: 1.
	Slots int
	// ID identifies the worker in the cluster (jobplane's TaskExecutor
	// id) for as long as it runs. Default: random, "te-" and 12 hex
	// digits.
	ID string
	// Logger receives the worker's logs, and is the base of Task.Logger
	// when the cluster keeps no output for the attempt. Default:
	// slog.Default().
	Logger *slog.Logger
	// HTTPClient carries the worker's calls to the cluster (HAStoreService,
	// ResourceManagerService, JobMasterService). Default: a client that
	// speaks unencrypted HTTP/2 with prior knowledge to http:// URLs (as
	// jobplane's own components do, one connection per process pair), and
	// HTTP/2 or HTTP/1.1, as the server negotiates, to https:// URLs with
	// TLSConfig.
	HTTPClient *http.Client
	// TLSConfig configures TLS for https:// URLs of the default HTTP
	// client; ignored when HTTPClient is set. Default: nil, Go's defaults
	// (the system's roots).
	TLSConfig *tls.Config
	// AllowExec offers the built-in "exec" invokable, which runs
	// commands on this machine. Default: false: the worker does not offer
	// exec, so the cluster places no exec subtask here, and refuses a job
	// that needs exec at submission when no TaskExecutor offers it
	// (INVOKABLE_NOT_OFFERED).
	AllowExec bool
	// OutputDir, if set, is the directory (created if need be) where the
	// worker keeps its attempts' output (Task.Logger, Task.Output, exec's
	// stdout and stderr) instead of memory: each attempt's last 64 KiB,
	// for OutputMaxAge after it ended, within OutputMaxBytes. A worker
	// started again on the directory serves the output of the attempts
	// that ended before, once the cluster finds it: with the same ID (or
	// at the same Advertise address). Default: none, output is kept in
	// memory for 10 minutes, at most 512 ended attempts.
	OutputDir string
	// OutputMaxAge is how long an ended attempt's output is kept in
	// OutputDir. Default: 24 hours.
	OutputMaxAge time.Duration
	// OutputMaxBytes bounds the bytes the output takes in OutputDir; the
	// output of the attempts that ended first is removed first. Default:
	// 256 MiB.
	OutputMaxBytes int64
}

// Validate reports whether the configuration can be used: Server is an
// absolute http:// or https:// URL, Listen a host:port, Advertise (when
// set) an absolute URL, and Slots not negative.
func (c Config) Validate() error {
	if c.Server == "" {
		return errors.New("worker: the server URL is required")
	}
	if err := checkURL(c.Server); err != nil {
		return fmt.Errorf("worker: server %w", err)
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("worker: listen address %q: %w", c.Listen, err)
		}
	}
	if c.Advertise != "" {
		if err := checkURL(c.Advertise); err != nil {
			return fmt.Errorf("worker: advertised %w", err)
		}
	}
	if c.Slots < 0 {
		return fmt.Errorf("worker: slots must not be negative (got %d)", c.Slots)
	}
	if c.OutputMaxAge < 0 || c.OutputMaxBytes < 0 {
		return errors.New("worker: the output bounds must not be negative")
	}
	return nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("URL %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("URL %q must be an absolute http:// or https:// URL", raw)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Slots == 0 {
		c.Slots = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// advertise returns the base URL at which the listener at addr is
// reached.
func advertise(addr net.Addr) (string, error) {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("worker: listening on every interface, and the host name to advertise is unknown (set Advertise): %w", err)
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
