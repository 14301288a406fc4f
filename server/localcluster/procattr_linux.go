package localcluster

import "syscall"

// sysProcAttr makes a child die with the process that started it
// (Linux's parent-death signal), so that a crashed test or tool leaves no
// process behind, and with group, puts it in a process group of its own.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}
