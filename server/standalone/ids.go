package standalone

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jobplane/jobplane/server/internal/atomicfile"
)

// idsFile, in the data directory of the embedded member, holds the stem of
// the in-process TaskExecutors' ids.
const idsFile = "jobplane-task-executors"

// taskExecutorIDs returns the ids of n in-process TaskExecutors: on a data
// directory, the same ids on every start, so that a restarted process's
// TaskExecutors answer for their predecessors, which the directory's lock
// proves gone with it (the new leader then need not wait out the task
// lease for what they held; see hastore.Members). Without one, random ids
// ("").
func taskExecutorIDs(dataDir string, n int) ([]string, error) {
	ids := make([]string, n)
	if dataDir == "" || n == 0 {
		return ids, nil
	}
	path := filepath.Join(dataDir, idsFile)
	b, err := os.ReadFile(path)
	stem := strings.TrimSpace(string(b))
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, err
	case stem == "":
		var r [6]byte
		_, _ = rand.Read(r[:])
		stem = "te-" + hex.EncodeToString(r[:])
		if err := atomicfile.Write(path, []byte(stem+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", stem, i)
	}
	return ids, nil
}
