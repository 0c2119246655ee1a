package server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/server/guard"
)

// dialFrom opens a connection to addr from the loopback address local (127.0.0.2 stands for a
// second client on this machine).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served reports whether a request on c gets an answer (true) or the server closed c (false).
func served(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	buf := make([]byte, 12)
	n, err := io.ReadFull(c, buf)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server neither answered nor closed the connection")
		}
		return false
	}
	return strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200")
}

func serveLimited(t *testing.T, l ConnLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(LimitListener(ln, l)) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Finding 2, the descriptors: one client address holds at most PerAddress connections, the
// ones beyond are closed at once, other clients (and the trusted proxy, which limits its own
// clients) are still served, and a closed connection gives its place back.
func TestSecurityConnectionsPerAddressAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	addr := serveLimited(t, ConnLimits{PerAddress: 10, Exempt: guard.Proxies{} /* loopback */, Metrics: m})
	var held []net.Conn
	for range 10 {
		c := dialFrom(t, "127.0.0.2", addr)
		if !served(t, c) {
			t.Fatal("a connection within the limit was closed")
		}
		held = append(held, c)
	}
	for range 40 {
		if served(t, dialFrom(t, "127.0.0.2", addr)) {
			t.Fatal("a connection beyond the per-address limit was served")
		}
	}
	if !served(t, dialFrom(t, "127.0.0.3", addr)) {
		t.Error("another address was refused while the first was at its limit")
	}
	for range 20 {
		if !served(t, dialFrom(t, "127.0.0.1", addr)) {
			t.Fatal("the trusted proxy's address was limited")
		}
	}
	held[0].Close()
	time.Sleep(50 * time.Millisecond) // the server notices the close
	if !served(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Error("a closed connection did not give its place back")
	}
	want := `
# HELP shoal_http_connections_refused_total Client connections closed as soon as accepted, by the limit they met: per_address or total.
# TYPE shoal_http_connections_refused_total counter
shoal_http_connections_refused_total{limit="per_address"} 40
shoal_http_connections_refused_total{limit="total"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_http_connections_refused_total"); err != nil {
		t.Error(err)
	}
}

// The total limit closes every connection beyond it, exempt addresses included.
func TestLimitListenerTotal(t *testing.T) {
	addr := serveLimited(t, ConnLimits{Total: 5, PerAddress: 100, Exempt: guard.NewProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})})
	for range 5 {
		if !served(t, dialFrom(t, "127.0.0.1", addr)) {
			t.Fatal("a connection within the total was closed")
		}
	}
	if served(t, dialFrom(t, "127.0.0.1", addr)) {
		t.Error("a connection beyond the total was served")
	}
}
