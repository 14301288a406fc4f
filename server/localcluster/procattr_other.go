//go:build !linux

package localcluster

import "syscall"

// sysProcAttr puts a child in a process group of its own with group.
// There is no parent-death signal here: Close and the tests' cleanups
// kill every child.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
