package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// A process's certificates, keys and certificate authorities are read
// again when their files change, so that an operator rotates them without
// a restart: every new TLS handshake (never a timer) stats the files and
// reloads those whose identity, size or modification time changed. A file
// that cannot be read or parsed on reload leaves the last good one in use
// and is logged once per change.

// fileState identifies one version of a file: the file (device and
// inode, as os.SameFile compares them), its size and modification time.
type fileState struct{ fi os.FileInfo }

func (s fileState) same(o fileState) bool {
	if s.fi == nil || o.fi == nil {
		return s.fi == o.fi
	}
	return os.SameFile(s.fi, o.fi) && s.fi.Size() == o.fi.Size() && s.fi.ModTime().Equal(o.fi.ModTime())
}

func statFile(name string) fileState {
	fi, err := os.Stat(name)
	if err != nil {
		return fileState{}
	}
	return fileState{fi}
}

// reloading holds the value read from a set of files, and reads it again
// when one of them changed since the last attempt.
type reloading[T any] struct {
	what  string // "TLS certificate", for the log
	files []string
	load  func() (T, error)
	log   *slog.Logger

	mu    sync.Mutex
	seen  []fileState // at the last attempt, good or bad
	value T           // the last good value
}

// newReloading reads the value once; it fails if that fails.
func newReloading[T any](what string, files []string, load func() (T, error), log *slog.Logger) (*reloading[T], error) {
	if log == nil {
		log = slog.Default()
	}
	r := &reloading[T]{what: what, files: files, load: load, log: log}
	r.seen = r.states()
	v, err := load()
	if err != nil {
		return nil, err
	}
	r.value = v
	return r, nil
}

func (r *reloading[T]) states() []fileState {
	s := make([]fileState, len(r.files))
	for i, f := range r.files {
		s[i] = statFile(f)
	}
	return s
}

// get returns the current value, reloading it first if a file changed.
func (r *reloading[T]) get() T {
	now := r.states()
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for i := range now {
		if !now[i].same(r.seen[i]) {
			changed = true
		}
	}
	if !changed {
		return r.value
	}
	r.seen = now
	v, err := r.load()
	if err != nil {
		r.log.Error(r.what+" changed but cannot be loaded; keeping the previous one", "files", r.files, "err", err)
		return r.value
	}
	r.value = v
	r.log.Info(r.what+" reloaded", "files", r.files)
	return r.value
}

// loadKeyPair reads a PEM certificate (chain) and its key.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("endpoint: TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &cert, nil
}

// loadPool reads a PEM file of certificate authorities.
func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("endpoint: TLS certificate authorities: %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

func newKeyPair(certFile, keyFile string, log *slog.Logger) (*reloading[*tls.Certificate], error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "":
		return nil, errors.New("endpoint: a TLS key needs its certificate")
	case keyFile == "":
		return nil, errors.New("endpoint: a TLS certificate needs its key")
	}
	return newReloading("TLS certificate", []string{certFile, keyFile}, func() (*tls.Certificate, error) { return loadKeyPair(certFile, keyFile) }, log)
}

func newPool(caFile string, log *slog.Logger) (*reloading[*x509.CertPool], error) {
	if caFile == "" {
		return nil, nil
	}
	return newReloading("TLS certificate authorities", []string{caFile}, func() (*x509.CertPool, error) { return loadPool(caFile) }, log)
}
