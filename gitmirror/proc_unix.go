//go:build unix

package gitmirror

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup puts git in a process group of its own and makes cancelling kill the whole
// group, so that a timeout also ends the helpers git started (git-remote-https, index-pack).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
