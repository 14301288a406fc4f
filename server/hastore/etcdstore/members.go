package etcdstore

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobplane/jobplane/server/hastore"
)

var _ hastore.Members = (*Store)(nil)

func (s *Store) memberPrefix() string { return s.prefix + "taskexecutors/" }

// AddTaskExecutor implements hastore.Members: one fenced put.
func (s *Store) AddTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	if err := hastore.ValidateMemberWrite(f, id); err != nil {
		return err
	}
	_, err := s.fenced(ctx, f, clientv3.OpPut(s.memberPrefix()+id, ""))
	return err
}

// RemoveTaskExecutor implements hastore.Members: one fenced delete.
func (s *Store) RemoveTaskExecutor(ctx context.Context, f hastore.Fence, id string) error {
	if err := hastore.ValidateMemberWrite(f, id); err != nil {
		return err
	}
	_, err := s.fenced(ctx, f, clientv3.OpDelete(s.memberPrefix()+id))
	return err
}

// TaskExecutors implements hastore.Members.
func (s *Store) TaskExecutors(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.scan(ctx, s.memberPrefix(), "", true, func(key string, _ []byte) bool {
		ids = append(ids, key)
		return true
	})
	return ids, err
}
