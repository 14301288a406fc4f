package hacluster

import "syscall"

// sysProcAttr makes a child die with the test process (Linux's
// parent-death signal), so that a crashed test leaves no process behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
