package embedded

import "syscall"

// childProcAttr puts the embedded database's process in a process group of its own and has the
// kernel kill it if the server dies (StartProcess keeps the starting thread alive).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// yieldToServer lowers the calling thread's scheduling priority to embeddedNice, so that the
// embedded database's process, started from it, inherits the priority in every thread it makes.
// StartProcess calls it on the thread it locked for the child and ends with it.
func yieldToServer() error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), embeddedNice)
}
