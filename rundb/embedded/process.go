package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The embedded database as a child process. FerretDB's writes are long stretches of CPU (a run
// write parses and re-encodes the whole document). In the server's own process they run on the
// Go scheduler's processors beside the request handlers, and on a server given one core a
// handler woken meanwhile waits for the runtime to preempt the write; as a process of its own,
// FerretDB is scheduled by the kernel, which lets a woken handler thread in at once. The figures
// are in docs/benchmarks/README.md ("Where the rest goes").
//
// The parent locks the data directory and hands the lock to the child, which keeps it open: the
// lock is held until both have exited, so no second database starts on the files while either
// lives. The child dies with its parent (the kernel's parent-death signal where there is one,
// and the end of its standard input everywhere), and stops when asked (SIGTERM) once the parent
// has written its last runs.

// LockFDEnv names the environment variable that tells a child database (`shoal db`)
// that its parent locked the data directory, and the file descriptor of that lock.
const LockFDEnv = "SHOAL_DB_LOCK_FD"

// ReadyPrefix begins the line a child database writes to its standard output once it
// accepts connections: the prefix, its socket's URI, a space, and its shared URI.
const ReadyPrefix = "shoal-db-ready "

// embeddedStartLimit bounds the wait for a child database to say it is ready.
const embeddedStartLimit = time.Minute

// embeddedStopLimit is how long a child database has to stop after SIGTERM before it is killed.
const embeddedStopLimit = 15 * time.Second

// Process is the embedded database run by a child process.
type Process struct {
	dir, uri, shared string
	lock             *os.File
	proc             *os.Process
	exited           chan struct{} // closed once the child has exited
	waitErr          error         // why it exited, set before exited closes
	lost             chan error    // receives waitErr if the child exits before Close
	closing          atomic.Bool
	once             sync.Once
	logger           *slog.Logger
}

// embeddedNice is the embedded database process's nice value (Linux). Its run writes are
// hundreds of milliseconds of CPU at a time; at the server's priority they would take half of a
// core the server shares with them, and every worker call would wait. Niced, the database works
// in the time the handlers leave, and a handler that wakes takes the processor back at once.
const embeddedNice = 10

// embeddedGCPercent is the embedded database process's GOGC unless the environment sets one:
// FerretDB decodes and encodes the whole of every run it writes, and in a CPU profile of
// repeated writes of a 670 kB run a fifth of the time went to the collector at Go's default
// (100), for a live heap of a few megabytes.
const embeddedGCPercent = 400

// StartProcess locks dataDir and runs command (a program and its arguments: `shoal db`)
// with --data and, if addr is set, --addr appended, the lock as file descriptor 3
// (LockFDEnv) and none of Shoal's SHOAL_* environment, since its flags say all it needs.
// It returns once the child says it accepts connections. Each line the child writes otherwise
// (its log, a panic) is logged to logger.
func StartProcess(command []string, dataDir, addr string, logger *slog.Logger) (*Process, error) {
	abs, lock, err := lockedDataDir(dataDir, addr)
	if err != nil {
		return nil, err
	}
	args := append(append([]string(nil), command[1:]...), "--data", abs)
	if addr != "" {
		args = append(args, "--addr", addr)
	}
	cmd := exec.Command(command[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHOAL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, LockFDEnv+"=3")
	if os.Getenv("GOGC") == "" {
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOGC=%d", embeddedGCPercent))
	}
	cmd.ExtraFiles = []*os.File{lock}
	// A process group of its own: a terminal's Ctrl-C goes to the server alone, which stops
	// its database once it has written its runs.
	cmd.SysProcAttr = childProcAttr()
	// Its output goes through writers, not pipes read here: Wait returns only once everything
	// it wrote has been logged, its last words before an exit included.
	ready := make(chan string, 1)
	cmd.Stdout = &childOutput{logger: logger, ready: ready}
	cmd.Stderr = &childOutput{logger: logger, stderr: true}
	// Its standard input is a pipe that nothing writes to: the write end closes when this
	// process dies, which the child reads as its signal to stop (Wait closes it otherwise).
	if _, err := cmd.StdinPipe(); err != nil {
		unlockDataDir(lock)
		return nil, err
	}
	p := &Process{dir: abs, lock: lock, exited: make(chan struct{}), lost: make(chan error, 1), logger: logger}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the thread that started the child ends, not the
		// process: this goroutine keeps its thread until the child has exited.
		runtime.LockOSThread()
		if err := yieldToServer(); err != nil {
			logger.Warn("lower the embedded database's priority", "err", err)
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
		if !p.closing.Load() {
			p.lost <- fmt.Errorf("the embedded database's process (pid %d) exited: %v", cmd.Process.Pid, p.waitErr)
		}
	}()
	if err := <-started; err != nil {
		unlockDataDir(lock)
		return nil, fmt.Errorf("start the embedded database's process %s: %w", command[0], err)
	}
	p.proc = cmd.Process
	timer := time.NewTimer(embeddedStartLimit)
	defer timer.Stop()
	select {
	case line := <-ready:
		uri, shared, _ := strings.Cut(line, " ")
		if uri != "" && shared != "" {
			p.uri, p.shared = uri, shared
			return p, nil
		}
		err = fmt.Errorf("the embedded database's process said it was ready without its addresses: %q", line)
	case <-p.exited:
		err = fmt.Errorf("the embedded database's process exited before it was ready (its output is in the log above): %v", p.waitErr)
	case <-timer.C:
		err = fmt.Errorf("the embedded database's process was not ready within %v", embeddedStartLimit)
	}
	p.Close()
	return nil, err
}

// Dir is the data directory.
func (p *Process) Dir() string { return p.dir }

// URI is the address of the child's Unix socket.
func (p *Process) URI() string { return p.uri }

// SharedURI is the address other processes of this user reach the child at (see Server.SharedURI).
func (p *Process) SharedURI() string { return p.shared }

// Where says which process runs the database, by its pid.
func (p *Process) Where() string { return fmt.Sprintf("process %d", p.proc.Pid) }

// Lost delivers an error if the child exits before Close.
func (p *Process) Lost() <-chan error { return p.lost }

// Gone reports whether the child has exited before Close.
func (p *Process) Gone() bool {
	select {
	case <-p.exited:
		return !p.closing.Load()
	default:
		return false
	}
}

// Close asks the child to stop (SIGTERM), kills it if it has not within embeddedStopLimit, and
// releases the data directory's lock once it has exited. Safe to call more than once.
func (p *Process) Close() {
	p.once.Do(func() {
		p.closing.Store(true)
		_ = p.proc.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(embeddedStopLimit):
			p.logger.Warn("the embedded database did not stop in time: killing it", "pid", p.proc.Pid, "after", embeddedStopLimit)
			_ = p.proc.Kill()
			<-p.exited
		}
		unlockDataDir(p.lock)
	})
}

// childOutput is where one of the child's output streams goes, a line at a time: on its
// standard output the first ready line is sent on ready, and the rest are its JSON log records
// (logChildLine); on its standard error (a panic, say) each line is a warning. exec.Cmd writes
// to it from one goroutine.
type childOutput struct {
	logger  *slog.Logger
	ready   chan<- string // until the ready line has been seen
	stderr  bool
	partial []byte
}

func (o *childOutput) Write(b []byte) (int, error) {
	o.partial = append(o.partial, b...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(o.partial[:i])
		o.partial = o.partial[i+1:]
		switch rest, isReady := strings.CutPrefix(line, ReadyPrefix); {
		case isReady && o.ready != nil:
			o.ready <- rest
			o.ready = nil
		case o.stderr:
			o.logger.Warn("embedded database", "stderr", line)
		default:
			logChildLine(o.logger, line)
		}
	}
}

// logChildLine logs a line of the child's standard output as logger's own record: the child
// logs JSON records (level, msg and attributes), marked here with component=db; anything else is
// logged as it came.
func logChildLine(logger *slog.Logger, line string) {
	var rec map[string]any
	if json.Unmarshal([]byte(line), &rec) != nil {
		logger.Info("embedded database", "output", line)
		return
	}
	var level slog.Level
	if s, ok := rec[slog.LevelKey].(string); !ok || level.UnmarshalText([]byte(s)) != nil {
		level = slog.LevelInfo
	}
	msg, _ := rec[slog.MessageKey].(string)
	attrs := []any{"component", "db"}
	for _, k := range slices.Sorted(maps.Keys(rec)) {
		if k != slog.TimeKey && k != slog.LevelKey && k != slog.MessageKey {
			attrs = append(attrs, k, rec[k])
		}
	}
	logger.Log(context.Background(), level, msg, attrs...)
}
