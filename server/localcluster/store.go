package localcluster

import (
	"context"
	"log/slog"

	"github.com/jobplane/jobplane/server/hastore"
	"github.com/jobplane/jobplane/server/hastore/etcdmember"
	"github.com/jobplane/jobplane/server/hastore/etcdstore"
)

// This file is the one place where the in-process cluster names its HA
// store's backend: the rest of the package sees a hastore.Store and a
// function that closes it.

// ErrDataDirInUse is the error (tested with errors.Is) with which Start
// fails when another cluster or process holds Config.DataDir.
var ErrDataDirInUse = etcdmember.ErrDataDirInUse

// storeLogMessage is what the cluster logs once its store is open.
const storeLogMessage = "ha store on embedded etcd"

// openStore opens an HA store on a single etcd member embedded in this
// process, on dir; close stops the member.
func openStore(ctx context.Context, dir string, log *slog.Logger) (store hastore.Store, close func() error, err error) {
	st, err := etcdstore.Open(ctx, etcdstore.OpenConfig{DataDir: dir, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	log.Info(storeLogMessage, "data_dir", dir)
	return st, st.Close, nil
}
