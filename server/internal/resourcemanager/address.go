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
