package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MinTokenLength is the shortest static token a token file may hold.
const MinTokenLength = 16

// tokenReloadInterval is how often, at most, a token file is looked at
// for changes: a changed file takes effect within it.
const tokenReloadInterval = time.Second

// tokenEntry is one line of a token file: a principal's name and the
// SHA-256 of its token (compared in constant time; the token itself is
// not kept).
type tokenEntry struct {
	name string
	hash [sha256.Size]byte
}

// tokenFile is a static token file, reloaded when it changes.
type tokenFile struct {
	path string
	log  *slog.Logger

	entries atomic.Pointer[[]tokenEntry]

	mu          sync.Mutex // held while reloading
	lastCheck   time.Time
	mod         time.Time
	size        int64
	lastFailure string
}

// openTokenFile reads a token file; see parseTokens for its format.
func openTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	f := &tokenFile{path: path, log: log}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := parseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s: no tokens", path)
	}
	f.entries.Store(&entries)
	f.mod, f.size, f.lastCheck = st.ModTime(), st.Size(), time.Now()
	return f, nil
}

// parseTokens parses a token file: one `NAME TOKEN` per line, separated
// by spaces or tabs; blank lines and lines starting with # are ignored.
// A name may hold several tokens (to rotate them); a token may appear
// only once, and must be at least MinTokenLength characters long.
func parseTokens(data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want NAME TOKEN, got %d fields", n, len(fields))
		}
		name, token := fields[0], fields[1]
		if len(token) < MinTokenLength {
			return nil, fmt.Errorf("line %d: the token of %s is shorter than %d characters", n, name, MinTokenLength)
		}
		h := sha256.Sum256([]byte(token))
		if first, dup := seen[h]; dup {
			return nil, fmt.Errorf("line %d: the same token as line %d", n, first)
		}
		seen[h] = n
		entries = append(entries, tokenEntry{name: name, hash: h})
	}
	return entries, sc.Err()
}

// lookup returns the name whose token is token. It compares the token's
// hash with every entry's in constant time, whichever matches.
func (f *tokenFile) lookup(token string) (string, bool) {
	f.reloadIfChanged()
	h := sha256.Sum256([]byte(token))
	match := -1
	entries := *f.entries.Load()
	for i := range entries {
		if subtle.ConstantTimeCompare(h[:], entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return entries[match].name, true
}

// reloadIfChanged reads the file again if its size or modification time
// changed, looking at most once per tokenReloadInterval. A file that
// cannot be read or parsed leaves the tokens as they were, and is logged
// once per failure.
func (f *tokenFile) reloadIfChanged() {
	if !f.mu.TryLock() {
		return // another call is looking
	}
	defer f.mu.Unlock()
	now := time.Now()
	if now.Sub(f.lastCheck) < tokenReloadInterval {
		return
	}
	f.lastCheck = now
	st, err := os.Stat(f.path)
	if err == nil && st.ModTime().Equal(f.mod) && st.Size() == f.size {
		return
	}
	var entries []tokenEntry
	if err == nil {
		var data []byte
		if data, err = os.ReadFile(f.path); err == nil {
			if entries, err = parseTokens(data); err == nil && len(entries) == 0 {
				err = fmt.Errorf("no tokens")
			}
		}
	}
	if err != nil {
		if msg := err.Error(); msg != f.lastFailure {
			f.lastFailure = msg
			f.log.Warn("the token file cannot be reloaded; its previous tokens stay in force", "file", f.path, "err", err)
		}
		return
	}
	f.entries.Store(&entries)
	f.mod, f.size, f.lastFailure = st.ModTime(), st.Size(), ""
	f.log.Info("token file reloaded", "file", f.path, "tokens", len(entries))
}
