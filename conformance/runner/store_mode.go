package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"connectrpc.com/connect"

	hastorev1 "github.com/jobplane/jobplane/gen/jobplane/hastore/v1"
	"github.com/jobplane/jobplane/gen/jobplane/hastore/v1/hastorev1connect"
	"github.com/jobplane/jobplane/sdk/election"
	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/hastorerpc"
	"github.com/jobplane/jobplane/server/hastore/storetest"
)

// StoreCases returns the cases of the store mode (--store-command): the
// HA store's contract suite, run over the network against a store process
// the runner starts fresh for each case, and the cases that check the
// store's answers on the wire.
func StoreCases() []Case {
	var out []Case
	for _, c := range storetest.Cases() {
		out = append(out, Case{Name: "store/" + kebab(c.Name), Doc: c.Doc, Run: func(t *T) { c.Run(t, t.store.backend(t)) }})
	}
	return slices.Concat(out, storeWireCases, storeConsistencyCases, storeEqualityCases)
}

// kebab turns a Go name into a case name: "NeverTwoLeaders" becomes
// "never-two-leaders".
func kebab(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// storeProc is an HA store process the runner started for a store case,
// on a fresh data directory; it can be restarted on the same data and
// address.
type storeProc struct {
	dir          string // the store's output is kept here
	command      string
	vars         map[string]string // listen, data
	maxPlanBytes int
	wire         wire
	http         *http.Client
	proc         *serverProc
}

// startStore starts the store command on a free loopback port and a data
// directory under dir, and waits until it serves.
func startStore(ctx context.Context, w wire, command, dir string, maxPlanBytes int) (*storeProc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &storeProc{
		wire:         w,
		dir:          dir,
		command:      command,
		vars:         map[string]string{"listen": addr, "data": filepath.Join(dir, "store")},
		maxPlanBytes: maxPlanBytes,
		http:         newHTTPClient("", w.rootCAs),
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *storeProc) url() string { return s.wire.scheme() + "://" + s.vars["listen"] }

// rpc returns a binary-protobuf client of the store, speaking the
// runner's protocol.
func (s *storeProc) rpc(opts ...connect.ClientOption) hastorev1connect.HAStoreServiceClient {
	return hastorev1connect.NewHAStoreServiceClient(s.http, s.url(), append(s.wire.options(), opts...)...)
}

// start runs the command (a new run of the same process after the
// first) and waits up to 60s until the store answers GetLeader. A port
// that a killed store held may take a moment to come free: the command
// is started again while it exits at once.
func (s *storeProc) start(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s.proc == nil {
			p, err := startProc("store", filepath.Join(s.dir, "output"), s.command, s.vars)
			if err != nil {
				return fmt.Errorf("start the store: %w", err)
			}
			s.proc = p
		} else if err := s.proc.proc.Restart(ctx); err != nil {
			return fmt.Errorf("start the store: %w", err)
		}
		p := s.proc
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := s.rpc().GetLeader(rctx, &hastorev1.GetLeaderRequest{Election: election.JobManager})
			cancel()
			if err == nil {
				return nil
			}
			if p.exited() || ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !p.exited() || ctx.Err() != nil || time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("the store did not serve HAStoreService.GetLeader at %s within 60s; its last output:\n%s", s.url(), lastLines(p.output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restart kills the store (SIGKILL) and starts it again on the same data
// and address.
func (s *storeProc) restart(ctx context.Context) error {
	s.proc.kill()
	return s.start(ctx)
}

func (s *storeProc) close() {
	if s.proc != nil && !s.proc.exited() {
		s.proc.kill()
	}
	s.http.CloseIdleConnections()
}

// backend is the store as the contract suite sees it: each Open a client
// of its own, as another process would have.
func (s *storeProc) backend(t *T) *storetest.Backend {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &storetest.Backend{
		Open: func(storetest.T) hastore.Store {
			return hastorerpc.NewClient(hastorerpc.ClientConfig{HTTPClient: s.http, BaseURL: s.url(), Options: s.wire.options(), Logger: quiet})
		},
		Restart: func(storetest.T) {
			if err := s.restart(t.ctx); err != nil {
				t.Fatalf("restarting the store: %v", err)
			}
		},
		MaxPlanBytes: s.maxPlanBytes,
	}
}

// runStoreCase runs one store case on a store of its own and returns its
// failures, why it skipped itself (if it did), and for --trace the
// store's output.
func runStoreCase(ctx context.Context, cfg Config, c Case) (failures []string, skipped, trace string) {
	ctx, cancel := context.WithTimeout(ctx, cfg.CaseTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "jobplane-conformance-store-")
	if err != nil {
		return []string{"environment: " + err.Error()}, "", ""
	}
	defer os.RemoveAll(dir)
	sp, err := startStore(ctx, cfg.wire, cfg.StoreCommand, dir, cfg.StoreMaxPlanBytes)
	if err != nil {
		return []string{"environment: " + err.Error()}, "", ""
	}
	defer sp.close()
	t := &T{ctx: ctx, store: sp}
	failures, skipped = t.run(cfg.CaseTimeout, func() { c.Run(t) })
	if cfg.Trace && (len(failures) > 0 || cfg.Verbose) {
		trace = fmt.Sprintf("--- output of the store (last lines)\n%s\n", lastLines(sp.proc.output(), 200))
	}
	return failures, skipped, trace
}

// codeAndReason formats the code and ErrorInfo reason of err, for
// messages.
func codeAndReason(err error) string {
	if err == nil {
		return "OK"
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	return fmt.Sprintf("%v (%s)", ce.Code(), reason(err))
}
