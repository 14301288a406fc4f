//go:build !linux

package hacluster

import "syscall"

// sysProcAttr is nil where there is no parent-death signal: Close and the
// tests' cleanups kill every child.
func sysProcAttr() *syscall.SysProcAttr { return nil }
