//go:build faultinject

package node

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
)

// writeFault is the run-cache write hook CrashInWriteEnv asks for: at the nth write it sends the
// process a SIGKILL as the write goes to the database. It is nil when the variable is unset.
func (inst *Instance) writeFault() func() {
	n, err := strconv.Atoi(inst.getenv(CrashInWriteEnv))
	if err != nil || n <= 0 {
		return nil
	}
	var writes atomic.Int64
	inst.logger.Warn("fault injection: this server kills itself during a run write", "write", n)
	return func() {
		if writes.Add(1) == int64(n) {
			go func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }()
		}
	}
}
