package embedded

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// countingHandler counts the WithAttrs calls that reach it.
type countingHandler struct {
	slog.Handler
	withAttrs *int
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	*h.withAttrs++
	return countingHandler{Handler: h.Handler.WithAttrs(attrs), withAttrs: h.withAttrs}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), withAttrs: h.withAttrs}
}

// The embedded database adds each statement's arguments to its logger for a debug record:
// below the floor they must cost no formatting, and a record that passes still carries every
// attribute and group, in order.
func TestLevelFloorAppliesAttributesOnlyToRecordsItPasses(t *testing.T) {
	var out bytes.Buffer
	n := 0
	inner := countingHandler{Handler: slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}), withAttrs: &n}
	l := slog.New(levelFloor{Handler: inner, min: slog.LevelError})

	big := strings.Repeat("x", 1<<20)
	for range 100 {
		l.With("sql", "UPDATE ...", "args", big).Debug(">>> UPDATE")
	}
	if n != 0 || out.Len() != 0 {
		t.Fatalf("debug records below the floor: %d WithAttrs calls reached the handler, %d bytes written", n, out.Len())
	}

	l.With("component", "ferretdb").WithGroup("conn").With("id", 7).Error("failed", "err", "disk full")
	got := out.String()
	for _, want := range []string{"level=ERROR", "msg=failed", "component=ferretdb", "conn.id=7", `conn.err="disk full"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the error record %q lacks %q", got, want)
		}
	}
	if n != 2 {
		t.Errorf("%d WithAttrs calls reached the handler for the one record that passed, want 2", n)
	}
	if strings.Contains(got, "xxxx") {
		t.Errorf("the error record carries attributes of other loggers: %.200q", got)
	}
}

// A server killed with its database's process still exiting leaves the lock held a moment by a
// process that is not the one named in the lock file: the next server waits for it. A live
// holder is refused at once.
func TestLockDataDirWaitsForADeadServersDatabase(t *testing.T) {
	dir := t.TempDir()
	held, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The lock file names this (live) process: refused at once.
	start := time.Now()
	if _, err := lockDataDir(dir); !errors.Is(err, ErrDatabaseInUse) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("lock held by a live process: %v", err)
	}
	if waited := time.Since(start); waited > lockHandoverLimit/2 {
		t.Errorf("refusing a live holder took %v", waited)
	}

	// The file names a process that has exited, while the lock is still held (by its child).
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	if err := os.WriteFile(filepath.Join(dir, lockFileName), []byte(strconv.Itoa(gone.Process.Pid)+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Flock(int(held.Fd()), syscall.LOCK_UN)
		_ = held.Close()
		close(released)
	}()
	lock, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock left by a dead server's exiting database: %v", err)
	}
	select {
	case <-released:
	default:
		t.Error("locked before the holder released it")
	}
	unlockDataDir(lock)
}

// The child database's JSON records are logged as the server's own, at their level; anything
// else it prints is logged as it came.
func TestLogChildLine(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	logChildLine(logger, `{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"index _id lookups","err":"disk full"}`)
	logChildLine(logger, `panic: boom`)
	got := out.String()
	for _, want := range []string{`level=WARN msg="index _id lookups" component=db err="disk full"`, `level=INFO msg="embedded database" output="panic: boom"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

// The child's output arrives in pieces: lines are put together, the ready line is handed over
// once, and its standard error is logged as warnings.
func TestChildOutput(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	ready := make(chan string, 1)
	out := &childOutput{logger: logger, ready: ready}
	for _, piece := range []string{`{"level":"INFO","msg":"sta`, "rting\"}\n" + ReadyPrefix + "mongodb://a/ mongodb://b/\n", ReadyPrefix + "again\n"} {
		if n, err := out.Write([]byte(piece)); n != len(piece) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := <-ready; got != "mongodb://a/ mongodb://b/" {
		t.Errorf("ready line %q", got)
	}
	errOut := &childOutput{logger: logger, stderr: true}
	_, _ = errOut.Write([]byte("panic: boom\n"))
	for _, want := range []string{`msg=starting component=db`, `output="` + ReadyPrefix + `again"`, `level=WARN msg="embedded database" stderr="panic: boom"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}
