//go:build !linux

package embedded

import "syscall"

// childProcAttr puts the embedded database's process in a process group of its own; without a
// parent-death signal, the end of its standard input tells it the server died.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// yieldToServer does nothing here: the child keeps the server's priority.
func yieldToServer() error { return nil }
