package etcdstore

import "context"

// QueuedWrites reports how many writes wait in s's committer, not yet
// sent and not given up by their callers, so that tests can line writes
// up behind one in flight.
func QueuedWrites(s *Store) int {
	s.commit.mu.Lock()
	defer s.commit.mu.Unlock()
	n := 0
	for _, w := range s.commit.queue {
		if w.ctx.Err() == nil {
			n++
		}
	}
	return n
}

// ListPlansInBatches lists the ids of s's plans as ListExecutionPlans
// does, reading batch keys at a time and calling between with each id
// listed before the next batch is read, so that tests can write between
// two batches.
func ListPlansInBatches(ctx context.Context, s *Store, batch int64, between func(id string)) ([]string, error) {
	var ids []string
	err := s.scanBatches(ctx, s.planPrefix(), "", true, batch, func(key string, _ []byte) bool {
		ids = append(ids, key)
		between(key)
		return true
	})
	return ids, err
}
