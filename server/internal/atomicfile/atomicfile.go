// Package atomicfile writes files that readers, and a process restarted
// after a crash, see whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a temporary file beside name, syncs it, and
// renames it into place with mode: a reader never sees a partial file,
// and once Write returns the content survives a crash of the process.
func Write(name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone by the rename unless something failed
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
