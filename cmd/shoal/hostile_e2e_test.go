//go:build !race

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// attackConn is one connection of the hostile client: how it behaves, and what the server did.
type attackConn struct {
	kind     string
	opened   time.Time
	lastSent time.Time     // when its last complete request went out (keep-alive kind)
	closed   time.Duration // from opened (or lastSent) to the server closing it
	served   bool          // it was accepted and held (not closed at once)
}

// attack opens conns connections to addr from local and behaves on each as kind says, until the
// server closes it; it returns what happened on each. Kinds:
//   - idle: connects and sends nothing;
//   - slow-headers: sends a request line and then one header byte a second;
//   - slow-body: sends an upload_pgn's headers and then one body byte a second;
//   - keep-alive: sends one complete request, reads the reply, then sends nothing.
func attack(t *testing.T, local, addr, kind string, conns int) []*attackConn {
	t.Helper()
	out := make([]*attackConn, conns)
	var wg sync.WaitGroup
	for i := range out {
		a := &attackConn{kind: kind}
		out[i] = a
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Errorf("dial from %s: %v", local, err) // a refusal closes after accepting, never fails the dial
			continue
		}
		a.opened = time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			a.closed = hold(c, a, addr)
		}()
	}
	wg.Wait()
	return out
}

// hold behaves on c as a.kind says and returns how long the server took to close c, counted
// from the last complete request for keep-alive and from the connection's start otherwise.
func hold(c net.Conn, a *attackConn, addr string) time.Duration {
	_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // the test's own bound
	closedAt := make(chan time.Time, 1)
	firstByte := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			_, err := c.Read(buf)
			select {
			case firstByte <- struct{}{}:
			default:
			}
			if err != nil {
				closedAt <- time.Now()
				return
			}
		}
	}()
	switch a.kind {
	case "keep-alive":
		a.lastSent = time.Now()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	case "slow-headers":
		fmt.Fprintf(c, "GET /tests HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
	case "slow-body":
		fmt.Fprintf(c, "POST /api/upload_pgn HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"pgn\": \"", addr)
	}
	trickle := time.NewTicker(time.Second)
	defer trickle.Stop()
	for {
		select {
		case at := <-closedAt:
			from := a.opened
			if a.kind == "keep-alive" {
				from = a.lastSent
			}
			// A refused connection is closed as soon as it is accepted; a held one lives at least
			// the shortest timeout (2 s here).
			a.served = at.Sub(a.opened) > time.Second
			return at.Sub(from)
		case <-trickle.C:
			if a.kind == "slow-headers" || a.kind == "slow-body" {
				_, _ = c.Write([]byte("x"))
			}
		}
	}
}

// One client opens thousands of idle and slow connections from a few addresses while a
// simulated fleet works: the fleet's requests keep succeeding, each address holds at most its
// connection limit (the rest are closed at once), and every connection the server took is
// closed within the timeouts it was configured with.
func TestE2EHostileConnectionsDoNotStopTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const workers = 30
	users := addUsers(t, bin, data, workers)
	addr := freeAddr(t)
	base := "http://" + addr
	const (
		readTimeout = 2 * time.Second
		idleTimeout = 3 * time.Second
		perAddress  = 150
		slack       = 2 * time.Second // scheduling on a loaded two-core machine
	)
	env := e2eServeEnv(data, "SHOAL_READ_TIMEOUT="+readTimeout.String(), "SHOAL_IDLE_TIMEOUT="+idleTimeout.String(),
		fmt.Sprintf("SHOAL_MAX_CONNECTIONS_PER_ADDRESS=%d", perAddress))
	startShoal(t, bin, dir, addr, env)
	req := demo.RunRequest("hostile connections")
	req.NumGames = 400_000
	if _, err := demo.SubmitRun(context.Background(), base, users, req); err != nil {
		t.Fatal(err)
	}

	// The fleet works from 127.0.0.1, the address nginx would come from; the hostile client
	// from 127.0.0.2 to 127.0.0.5.
	done := make(chan *fleet.Report, 1)
	go func() {
		rep, err := fleet.Run(context.Background(), fleet.Options{ServerURL: base, Username: users.Workers.Name,
			Password: users.Workers.Password, Workers: workers, Concurrency: 4, TimeScale: e2eScale,
			Arrival: fleet.Ramp, Ramp: time.Second, Duration: 20 * time.Second, Elo: 2, DrawRatio: 0.6, Seed: 3,
			IdleConnTimeout: idleTimeout / 3})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(2 * time.Second) // the fleet is at work

	kinds := []string{"idle", "slow-headers", "slow-body", "keep-alive"}
	var (
		mu      sync.Mutex
		results []*attackConn
		wg      sync.WaitGroup
	)
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := attack(t, fmt.Sprintf("127.0.0.%d", i+2), addr, kind, 750)
			mu.Lock()
			results = append(results, got...)
			mu.Unlock()
		}()
	}
	// While the attack is on, a person's page and the health check still answer.
	time.Sleep(500 * time.Millisecond)
	for _, path := range []string{"/healthz", "/tests"} {
		if code, _ := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s during the attack = %d", path, code)
		}
	}
	wg.Wait()
	rep := <-done
	if rep == nil {
		t.Fatal("no fleet report")
	}

	byKind := map[string][]time.Duration{}
	for _, a := range results {
		if a.opened.IsZero() {
			continue
		}
		if a.served {
			byKind[a.kind] = append(byKind[a.kind], a.closed)
		}
	}
	for _, kind := range kinds {
		held := byKind[kind]
		if len(held) == 0 || len(held) > perAddress {
			t.Errorf("%s: the server held %d of 750 connections from one address, want 1 to %d", kind, len(held), perAddress)
			continue
		}
		limit := readTimeout + slack
		if kind == "keep-alive" {
			limit = idleTimeout + slack
		}
		if worst := slices.Max(held); worst > limit {
			t.Errorf("%s: a connection stayed open %v, want it closed within %v", kind, worst.Round(time.Millisecond), limit)
		}
		t.Logf("%s: %d of 750 held, closed after at most %v", kind, len(held), slices.Max(held).Round(time.Millisecond))
	}

	if rep.TransportErrors != 0 || len(rep.HTTPErrors) != 0 || rep.BadReplies != 0 || len(rep.WorkerExitErrors) != 0 {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Errorf("the fleet's requests failed during the attack: transport %d, HTTP %v, bad replies %d, exits %v\n%s",
			rep.TransportErrors, rep.HTTPErrors, rep.BadReplies, rep.WorkerExitErrors, &b)
	}
	if rep.GamesReported == 0 || rep.Endpoints["update_task"].Requests == 0 {
		t.Errorf("the fleet reported %d games in %d updates, want work done", rep.GamesReported, rep.Endpoints["update_task"].Requests)
	}
}
