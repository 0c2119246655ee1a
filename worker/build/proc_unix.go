//go:build unix

package build

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own and makes its cancellation kill the whole
// group: make's children (the compilers, a test's sleep) die with it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
}

// killGroup kills cmd's process group, if it started; what is left of it after make exited
// (a stray background job) goes too.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
