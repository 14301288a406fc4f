package resourcemanager

// TaskExecutorAddress returns the address at which a registered
// TaskExecutor serves TaskExecutorService, and whether it is registered
// here (false too while not leading).
func (rm *ResourceManager) TaskExecutorAddress(id string) (string, bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.pool == nil {
		return "", false
	}
	e := rm.pool.executors[id]
	if e == nil {
		return "", false
	}
	return e.address, true
}

// JobsHoldingSlots returns the ids of the jobs that hold slots on the
// registered TaskExecutors (by their slot reports and this leadership's
// allocations), in no order; none while not leading.
func (rm *ResourceManager) JobsHoldingSlots() []string {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.pool == nil {
		return nil
	}
	ids := make([]string, 0, len(rm.pool.byJob))
	for id := range rm.pool.byJob {
		ids = append(ids, id)
	}
	return ids
}
