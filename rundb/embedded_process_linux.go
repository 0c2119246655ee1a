package rundb

import "syscall"

// childProcAttr puts the embedded database's process in a process group of its own and has the
// kernel kill it if the server dies (startEmbeddedProcess keeps the starting thread alive).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
