package etcdmember

import "errors"

// ErrDataDirInUse: another embedded member holds the data directory; the
// error is a *DataDirInUseError naming the directory and, when it can be
// known, the holder's process id.
var ErrDataDirInUse = errors.New("hastore: data directory is in use by another process")
