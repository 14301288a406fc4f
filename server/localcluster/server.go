package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ServerCommand says how a jobplane server process runs: Program Verb
// --listen ADDR --listen-addr-file DIR/addr Args..., in its directory
// Dir.
type ServerCommand struct {
	// Name names the process, as Command.Name. Required.
	Name string
	// Dir is the process's directory, as Command.Dir. Required.
	Dir string
	// Program is the jobplane binary (see Binaries). Required.
	Program string
	// Verb is the server verb: "jobmanager", "taskexecutor", "hastore"
	// or "standalone". Required.
	Verb string
	// Args follow the listen flags. Default: none.
	Args []string
	// Env is the environment, as Command.Env. Default: the calling
	// process's.
	Env []string
	// Ready, if set, waits further until a run serves, once it wrote its
	// address (Process.URL is known then). Default: a run is ready once
	// it wrote its address.
	Ready func(ctx context.Context, p *Process) error
}

// addrFileName is the file in a server's directory into which it writes
// its address.
const addrFileName = "addr"

// StartServer starts a jobplane server process on a free loopback port
// and waits until it wrote its address and then until s.Ready, if set,
// says it serves. Every restart listens on the address of the first run,
// so that its URL (Process.URL, "http://" and the address) stays the
// same. It fails as StartProcess does.
func StartServer(ctx context.Context, s ServerCommand) (*Process, error) {
	addrFile := filepath.Join(s.Dir, addrFileName)
	var (
		mu     sync.Mutex
		listen = "127.0.0.1:0"
	)
	cmd := Command{Name: s.Name, Dir: s.Dir, Path: s.Program, Env: s.Env}
	cmd.Args = func() []string {
		mu.Lock()
		defer mu.Unlock()
		// The new run writes its address anew; the readiness waits for it.
		os.Remove(addrFile)
		return append([]string{s.Verb, "--listen", listen, "--listen-addr-file", addrFile}, s.Args...)
	}
	cmd.Ready = func(ctx context.Context, p *Process) error {
		addr, err := readAddr(ctx, p, addrFile)
		if err != nil {
			return err
		}
		mu.Lock()
		listen = addr
		mu.Unlock()
		p.mu.Lock()
		p.url = "http://" + addr
		p.mu.Unlock()
		if s.Ready == nil {
			return nil
		}
		return s.Ready(ctx, p)
	}
	return StartProcess(ctx, cmd)
}

// readAddr waits until addrFile holds an address.
func readAddr(ctx context.Context, p *Process, addrFile string) (string, error) {
	var addr string
	err := p.Poll(ctx, 10*time.Millisecond, func(context.Context) error {
		b, err := os.ReadFile(addrFile)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return errors.New("no address written yet")
		}
		addr = strings.TrimSpace(string(b))
		return nil
	})
	return addr, err
}
