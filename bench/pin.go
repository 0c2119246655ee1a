package bench

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
// takes the other's processor time: unpinned, the fleet's scheduling lag swamps the server's
// latencies (docs/benchmarks/README.md, "How it measures").

// fleetProcs is the fleet's GOMAXPROCS when it has one CPU of its own: two processors on it, so
// that its collector's mark worker runs on a thread of its own, which the kernel interleaves
// with the workers' thread, instead of in the workers' place on the one processor Go would
// give it, where each cycle queues the workers (docs/benchmarks/README.md, "500,000 held").
const fleetProcs = 2

// defaultFleetProcesses is how many processes the fleets of steady, durability and capacity
// are split over (fleet.Options.Processes), each with fleetProcs Go processors on the fleet's
// CPU: four gave the quietest tails of one, four and eight, for some more CPU per request
// (docs/benchmarks/README.md, "The fleet split over processes").
const defaultFleetProcesses = 4

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

// raiseFileLimit raises this process's open-file limit (which the servers it starts inherit) to
// at least need, past the hard limit where the process may (root with CAP_SYS_RESOURCE), and
// says what it is: a simulated worker holds up to two connections, so a storm of 20,000 needs
// some 40,000 descriptors in the fleet and as many in the server.
func raiseFileLimit(need uint64) string {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return "open-file limit unknown: " + err.Error()
	}
	if rl.Cur < need {
		want := syscall.Rlimit{Cur: need, Max: max(rl.Max, need)}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
			want = syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
		}
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	if rl.Cur < need {
		return fmt.Sprintf("open-file limit %d, under the %d the largest fleet may hold at once: if its workers run out of sockets, their transport errors are the generator's", rl.Cur, need)
	}
	return fmt.Sprintf("open-file limit %d", rl.Cur)
}
