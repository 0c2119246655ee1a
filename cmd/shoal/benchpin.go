package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// The bench pins the server to one core and itself (the fleet) to the others, so that neither
// takes the other's processor time: on two cores unpinned, the fleet's scheduling lag swamped
// the server's latencies (the same steady settings gave an update_task p99 of 0.4 s in one leg
// and 1.3 s in the next).

// benchPinning says where the server and the bench run: the server on CPU 0 under taskset, the
// bench on every other CPU; "" if the machine has one CPU or no taskset.
func benchPinning() (taskset string, why string) {
	if runtime.NumCPU() < 2 {
		return "", "one CPU: nothing to pin"
	}
	path, err := exec.LookPath("taskset")
	if err != nil {
		return "", "no taskset (util-linux): not pinned"
	}
	return path, ""
}

// pinSelf restricts every thread of this process to the CPUs from first on (new threads inherit
// the mask of the thread that makes them).
func pinSelf(first int) error {
	var mask [16]uint64 // 1024 CPUs
	for cpu := first; cpu < runtime.NumCPU() && cpu < 1024; cpu++ {
		mask[cpu/64] |= 1 << (cpu % 64)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask[0])))
		if errno != 0 {
			return fmt.Errorf("pin thread %d: %w", tid, errno)
		}
	}
	return nil
}
