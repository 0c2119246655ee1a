package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// BareCommand is the shoal-bench subcommand that runs ServeBare: the ceiling scenario starts it as a
// process of its own, on the server's core, so that its CPU per request is measured the way the
// server's is.
const BareCommand = "bench-bare"

// bareHandler is the ceiling scenario's yardstick: it decodes a JSON object and answers one, the
// least a worker API handler does, on net/http alone.
func bareHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"task_alive": true, "duration": 0.0})
	})
}

// bareAllocatedLine starts the line ServeBare prints as it returns: the bytes the Go runtime
// allocated while it served, the same count as the server's go_memstats_alloc_bytes_total.
const bareAllocatedLine = "allocated bytes:"

// ServeBare serves the bare JSON handler on addr until ctx ends (`shoal-bench bench-bare ADDR`),
// then prints to stdout what it allocated while it served (bareAllocatedLine), so that the
// yardstick's allocations per request stand beside the server's.
func ServeBare(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: shoal-bench %s HOST:PORT", BareCommand)
	}
	l, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bareHandler(), ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	start := heapAllocated()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	_, err = fmt.Fprintln(stdout, bareAllocatedLine, heapAllocated()-start)
	return err
}

// heapAllocated is the bytes the Go runtime has allocated on the heap since the process started.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// bareAllocated finds the bytes a bare server reported allocating (bareAllocatedLine) in its
// output; false if it reported none.
func bareAllocated(out string) (uint64, bool) {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), bareAllocatedLine); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// bareServer is a running `shoal-bench bench-bare`.
type bareServer struct {
	cmd  *exec.Cmd
	url  string
	out  *strings.Builder // its stdout and stderr; read only once done is closed
	done chan struct{}
}

// startBare starts `shoal-bench bench-bare` on a loopback port, pinned like the servers, and waits
// until it accepts connections.
func startBare(ctx context.Context, set plan) (*bareServer, error) {
	port, err := LoopbackPort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	b := &bareServer{url: "http://" + addr + "/api/beat", out: new(strings.Builder), done: make(chan struct{})}
	b.cmd = set.onServerCore(set.self, BareCommand, addr)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", BareCommand, err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }() // joined by stop
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("%s exited before it listened: %s", BareCommand, strings.TrimSpace(b.out.String()))
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("%s not listening after 30 s", BareCommand)
		}
	}
}

// stop ends the bare server and waits for it.
func (b *bareServer) stop() { stopChild(b.cmd.Process, b.done, 10*time.Second) }

// stopChild interrupts a process the bench started, kills it if it has not exited (done
// closed) within grace, and waits for it.
func stopChild(p *os.Process, done <-chan struct{}, grace time.Duration) {
	_ = p.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
	}
}
