package etcdmember

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

// LockFileName is the file in a member's data directory that the member
// holds an exclusive lock on while it runs, and into which it writes its
// process id.
const LockFileName = "jobplane.lock"

// DataDirInUseError says that another member, in this process or another,
// holds the data directory. errors.Is(err, ErrDataDirInUse) is true for it.
type DataDirInUseError struct {
	// Dir is the data directory.
	Dir string
	// PID is the holder's process id, or 0 when it cannot be known (the
	// holder has not written it yet, or the platform forbids reading a
	// locked file).
	PID int
}

func (e *DataDirInUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("hastore: data directory %s is in use by another process", e.Dir)
	}
	return fmt.Sprintf("hastore: data directory %s is in use by another process (pid %d)", e.Dir, e.PID)
}

// Is makes errors.Is(err, ErrDataDirInUse) true for a DataDirInUseError.
func (e *DataDirInUseError) Is(target error) bool { return target == ErrDataDirInUse }

// dirLock is the held lock on a data directory.
type dirLock struct{ f *fileutil.LockedFile }

// lockDataDir takes the data directory's lock without waiting, creating
// the directory if absent, and records the process id in the lock file.
//
// etcd itself also locks its files, but by blocking: a second member on a
// held directory would hang in bbolt's open forever without a word. The
// lock is taken here, before etcd starts, so the second one fails at once
// and says who holds the directory.
func lockDataDir(dir string) (*dirLock, error) {
	// etcd wants its data directory private; create it so from the start.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hastore: create data directory: %w", err)
	}
	name := filepath.Join(dir, LockFileName)
	f, err := fileutil.TryLockFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, &DataDirInUseError{Dir: dir, PID: readPID(name)}
	}
	if err != nil {
		return nil, fmt.Errorf("hastore: lock data directory %s: %w", dir, err)
	}
	// The file outlives its holders (removing it would let two processes
	// lock two different inodes under one name), so it may still hold an
	// earlier holder's pid: replace it.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hastore: write %s: %w", name, err)
	}
	return &dirLock{f: f}, nil
}

// readPID returns the process id recorded in the lock file, or 0.
func readPID(name string) int {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// unlock releases the lock. The file stays, see lockDataDir.
func (l *dirLock) unlock() error { return l.f.Close() }
