package etcdstore

// QueuedWrites reports how many writes wait in s's committer, not yet
// sent, so that tests can line writes up behind one in flight.
func QueuedWrites(s *Store) int {
	s.commit.mu.Lock()
	defer s.commit.mu.Unlock()
	return len(s.commit.queue)
}
