package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/protocol"
)

// benchServer is a `shoal serve` child process with the demo's users.
type benchServer struct {
	cmd     *exec.Cmd
	base    string
	users   demo.Users
	dir     string
	log     *os.File
	pprof   string    // base URL of the server's profiles
	keep    bool      // leave dir in place
	stderr  io.Writer // where stop says it kept dir
	done    chan struct{}
	waitErr error
	// start is the command that starts the server again (restart), the same each time.
	start func() *exec.Cmd
}

// startBenchServer starts `shoal serve` as a child process on a fresh database, its time knobs
// ServerTimesAt(set.TimeScale) (compressed as the demo's are), with the demo's users (machine limit
// machineLimit) added with `shoal user add` before it starts. With --keep, stop tells stderr
// where the server's directory is.
func startBenchServer(ctx context.Context, set plan, machineLimit int, stderr io.Writer) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "shoal-bench-")
	if err != nil {
		return nil, err
	}
	s := &benchServer{dir: dir, keep: set.keep, stderr: stderr, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	port, err := LoopbackPort()
	if err != nil {
		return nil, err
	}
	db := []string{"--data", filepath.Join(dir, "data")}
	if set.mongoURI != "" {
		db = append(db, "--mongo-uri", set.mongoURI, "--database", "shoal_bench_"+strings.ToLower(rand.Text()[:10]))
	}
	if s.users, err = demo.AddUsersCLI(ctx, set.exe, db, machineLimit, func(string) string { return rand.Text() }); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "SHOAL_ADMIN_PASSWORD="+rand.Text())
	s.log, err = os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if set.profiles != "" {
		pport, err := LoopbackPort()
		if err != nil {
			return nil, err
		}
		paddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
		db = append(db, "--pprof-addr", paddr)
		s.pprof = "http://" + paddr
	}
	times := ServerTimesAt(set.TimeScale)
	args := append([]string{"serve", "--addr", addr, "--log-level", "warn",
		"--heartbeat-period", times.HeartbeatPeriod.String(), "--dead-task-timeout", times.DeadTaskTimeout.String(),
		"--scavenge-period", times.ScavengePeriod.String(), "--duplicate-worker-window", times.DuplicateWorkerWindow.String()}, db...)
	args = append(args, set.serveArgs...)
	// Not CommandContext: the server is stopped with SIGTERM, gracefully, by stop.
	s.start = func() *exec.Cmd {
		cmd := set.onServerCore(set.serverExe, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = env, s.log, s.log, dir
		return cmd
	}
	s.base = "http://" + addr
	if err := s.launch(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// launch starts the server's process and waits until it is ready (/readyz polled every 20 ms, so
// that a restart's return is timed closely).
func (s *benchServer) launch(ctx context.Context) error {
	s.cmd, s.done = s.start(), make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start shoal serve: %w", err)
	}
	cmd, done := s.cmd, s.done
	go func() { s.waitErr = cmd.Wait(); close(done) }() // joined by stop
	return s.waitUntil(ctx, "ready", 20*time.Millisecond, func() bool { return serverReady(ctx, s.base) })
}

// restart stops the server gracefully, as stop does, calls away (if not nil) once its process
// has exited, and starts it again on the same data and address. down is when it was told to
// stop, up when it was ready again as the primary: a server starting beside the lease of the
// one it replaces may be ready first as a standby, whose worker API answers 503.
func (s *benchServer) restart(ctx context.Context, away func()) (down, up time.Time, err error) {
	down = time.Now()
	stopChild(s.cmd.Process, s.done, time.Minute)
	if away != nil {
		away()
	}
	if err := s.launch(ctx); err != nil {
		return down, time.Time{}, err
	}
	err = s.waitUntil(ctx, "the primary", 20*time.Millisecond, func() bool {
		role, _ := s.role(ctx)
		return role == "primary"
	})
	if err != nil {
		return down, time.Time{}, err
	}
	return down, time.Now(), nil
}

// waitUntil polls the running server every period until ok says it is what names, and fails
// once its process exits, ctx ends or 90 s have passed.
func (s *benchServer) waitUntil(ctx context.Context, what string, period time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(90 * time.Second); ; {
		if ok() {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("shoal serve exited before it was %s (%v): %s", what, s.waitErr, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shoal serve not %s after 90 s: %s", what, s.logTail())
		}
	}
}

// role is the server's role as /readyz says it.
func (s *benchServer) role(ctx context.Context) (string, error) {
	body, err := httpGet(ctx, s.base+"/readyz")
	if err != nil {
		return "", err
	}
	var r protocol.ReadyReply
	if err := json.Unmarshal(body, &r); err != nil {
		return "", err
	}
	return r.Role, nil
}

// serverReady reports whether the server at base answers /readyz with 200.
func serverReady(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logTail is the end of the server's log, for an error message.
func (s *benchServer) logTail() string {
	data, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// stop ends the server with SIGTERM (SIGKILL after a minute) and removes its directory.
func (s *benchServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		stopChild(s.cmd.Process, s.done, time.Minute)
	}
	if s.log != nil {
		s.log.Close()
	}
	if s.keep {
		fmt.Fprintf(s.stderr, "bench: kept the server's directory %s\n", s.dir)
		return
	}
	os.RemoveAll(s.dir)
}

// submitRuns creates and approves n fixed-games runs that do not finish during a bench.
func (s *benchServer) submitRuns(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, 0, n)
	for i := range n {
		req := demo.RunRequest(fmt.Sprintf("bench run %d", i+1))
		req.NumGames = 400000
		id, err := demo.SubmitRun(ctx, s.base, s.users, req)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// LoopbackPort returns a loopback port free a moment ago.
func LoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
