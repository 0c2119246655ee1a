package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connServer is an httptest server that counts the connections it accepted and closed.
type connServer struct {
	*httptest.Server
	accepted, closed atomic.Int64
}

func newConnServer(t *testing.T, h http.Handler, idleTimeout time.Duration) *connServer {
	t.Helper()
	s := &connServer{Server: httptest.NewUnstartedServer(h)}
	s.Config.IdleTimeout = idleTimeout
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// addr is the server's host:port, the key of its idle connections.
func (s *connServer) addr() string { return strings.TrimPrefix(s.URL, "http://") }

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// post sends body to url and returns the reply's status and body.
func post(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read reply: %v", url, err)
	}
	return resp.StatusCode, string(data)
}

// echo answers the request's body, method and Content-Type, and says whether the request asked
// for compression.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s %s %s ae=%q", r.Method, r.Header.Get("Content-Type"), body, r.Header.Get("Accept-Encoding"))
}

func TestLightTransportKeepsConnectionsAlive(t *testing.T) {
	s := newConnServer(t, http.HandlerFunc(echo), 0)
	tr := &lightTransport{idleTimeout: time.Minute}
	c := &http.Client{Transport: tr}
	for i := range 20 {
		status, got := post(t, c, s.URL+"/api/beat", fmt.Sprintf(`{"n":%d}`, i))
		if want := fmt.Sprintf(`POST application/json {"n":%d} ae=""`, i); status != 200 || got != want {
			t.Fatalf("request %d: %d %q, want 200 %q", i, status, got, want)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1", n)
	}
	if n := tr.idleConns(s.addr()); n != 1 {
		t.Errorf("%d idle connections after the requests, want 1", n)
	}
}

func TestLightTransportConnectionClose(t *testing.T) {
	s := newConnServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/close": // the reply says the connection ends
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		case "/hangup": // a whole reply, then the server closes without saying so
			conn, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye")
			bw.Flush()
			conn.Close()
		default:
			echo(w, r)
		}
	}), 0)
	tr := &lightTransport{idleTimeout: time.Minute}
	c := &http.Client{Transport: tr}
	if _, got := post(t, c, s.URL+"/close", ""); got != "bye" {
		t.Fatalf("/close answered %q", got)
	}
	if n := tr.idleConns(s.addr()); n != 0 {
		t.Fatalf("a connection the reply closed went back to the pool (%d idle)", n)
	}
	if _, got := post(t, c, s.URL+"/x", "a"); got != `POST application/json a ae=""` {
		t.Fatalf("after Connection: close: %q", got)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a new one after Connection: close)", n)
	}

	// After a hangup, the next request finds the connection closed before any reply byte, and
	// is sent again on a new connection.
	if _, got := post(t, c, s.URL+"/hangup", ""); got != "bye" {
		t.Fatalf("/hangup answered %q", got)
	}
	waitFor(t, "the server to close the hung-up connection", func() bool { return s.closed.Load() == 2 })
	if _, got := post(t, c, s.URL+"/x", "b"); got != `POST application/json b ae=""` {
		t.Fatalf("after a hangup: %q", got)
	}
	if n := s.accepted.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

func TestLightTransportRetriesOnceOnAStaleConnection(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	s := newConnServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		mu.Unlock()
		w.Write(body)
	}), 50*time.Millisecond) // the server closes idle connections before the fleet would
	tr := &lightTransport{idleTimeout: time.Minute}
	c := &http.Client{Transport: tr}
	if _, got := post(t, c, s.URL, "first"); got != "first" {
		t.Fatalf("first request: %q", got)
	}
	waitFor(t, "the server to close the idle connection", func() bool { return s.closed.Load() == 1 })
	if tr.idleConns(s.addr()) != 1 {
		t.Fatal("the stale connection is not in the pool")
	}
	if _, got := post(t, c, s.URL, "second"); got != "second" {
		t.Fatalf("request on a stale connection: %q", got)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(bodies, ",") != "first,second" {
		t.Fatalf("the server got %q", bodies)
	}

	// A body that cannot be had again (no GetBody) is not sent again: the error comes back.
	waitFor(t, "the server to close the idle connection", func() bool { return s.closed.Load() == 2 })
	req, _ := http.NewRequest(http.MethodPost, s.URL, io.NopCloser(strings.NewReader("third")))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a request without GetBody was sent again")
	}
}

// When the server has closed every pooled connection (a restart, an idle timeout), the retry
// dials instead of taking the next dead one from the pool.
func TestLightTransportRetryDialsPastDeadPooledConnections(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	s := newConnServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) == "pair" {
			arrived.Done()
			arrived.Wait() // the two requests hold two connections at once
		}
		w.Write(body)
	}), 50*time.Millisecond)
	tr := &lightTransport{idleTimeout: time.Minute}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := c.Post(s.URL, "application/json", strings.NewReader("pair"))
			if err != nil {
				t.Errorf("pair: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	waitFor(t, "the server to close both idle connections", func() bool { return s.closed.Load() == 2 })
	if n := tr.idleConns(s.addr()); n != 2 {
		t.Fatalf("%d pooled connections, want the 2 dead ones", n)
	}
	if _, got := post(t, c, s.URL, "after"); got != "after" {
		t.Fatalf("request after the server closed every pooled connection: %q", got)
	}
}

func TestLightTransportNoRetryAfterReplyBytes(t *testing.T) {
	var calls atomic.Int64
	s := newConnServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			io.WriteString(w, "ok")
			return
		}
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		bw.WriteString("HTTP/1.1 200 OK\r\nX-A: b\r\n") // part of the header, then the end
		bw.Flush()
		conn.Close()
	}), 0)
	c := &http.Client{Transport: &lightTransport{idleTimeout: time.Minute}}
	if _, got := post(t, c, s.URL, "a"); got != "ok" {
		t.Fatalf("first request: %q", got)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader([]byte("b")))
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a cut reply gave no error")

	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the server got %d requests, want 2: a request is not sent again after reply bytes", n)
	}
}

// blocking is a handler that answers /slow only when release is closed (or the request ends),
// and /body with a header and half a body, the rest when release is closed.
type blocking struct {
	release chan struct{}
	gone    atomic.Int64 // requests whose connection closed while waiting
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.ReadAll(r.Body) // so that the server watches the connection for its end
	if r.URL.Path == "/body" {
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "ab")
		http.NewResponseController(w).Flush()
	}
	select {
	case <-b.release:
		io.WriteString(w, "cd")
	case <-time.After(3 * time.Second): // a transport that ignores the end of a request fails, not hangs
		io.WriteString(w, "cd")
	case <-r.Context().Done():
		b.gone.Add(1)
	}
}

func TestLightTransportCancellationAndTimeouts(t *testing.T) {
	h := &blocking{release: make(chan struct{})}
	s := newConnServer(t, h, 0)
	defer close(h.release)

	check := func(name string, c *http.Client, ctx context.Context, path string, want func(error) bool) {
		t.Helper()
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, bytes.NewReader([]byte("x")))
		resp, err := c.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: took %v", name, took)
		}
		if err == nil || !want(err) {
			t.Errorf("%s: error %v", name, err)
		}
	}
	isTimeout := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, context.DeadlineExceeded)
	}
	isCanceled := func(err error) bool { return errors.Is(err, context.Canceled) }

	tr := &lightTransport{idleTimeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	check("cancelled while waiting for the header", &http.Client{Transport: tr}, ctx, "/slow", isCanceled)
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	check("cancelled while reading the body", &http.Client{Transport: tr}, ctx, "/body", isCanceled)
	check("http.Client's Timeout", &http.Client{Transport: tr, Timeout: 100 * time.Millisecond}, context.Background(), "/slow", isTimeout)
	check("http.Client's Timeout while reading the body", &http.Client{Transport: tr, Timeout: 100 * time.Millisecond}, context.Background(), "/body", isTimeout)
	own := &lightTransport{idleTimeout: time.Minute, timeout: 100 * time.Millisecond}
	check("the transport's timeout", &http.Client{Transport: own}, context.Background(), "/slow", isTimeout)
	check("the transport's timeout while reading the body", &http.Client{Transport: own}, context.Background(), "/body", isTimeout)

	// Every connection was closed, none went back to a pool, and the server saw each go.
	waitFor(t, "the server to see the 6 connections closed", func() bool { return h.gone.Load() == 6 && s.closed.Load() == 6 })
	if n := tr.idleConns(s.addr()) + own.idleConns(s.addr()); n != 0 {
		t.Errorf("%d connections went back to the pool", n)
	}
	if n := s.accepted.Load(); n != 6 {
		t.Errorf("%d connections, want 6", n)
	}
}

func TestLightTransportIdleTimeout(t *testing.T) {
	s := newConnServer(t, http.HandlerFunc(echo), 0)
	tr := &lightTransport{idleTimeout: 100 * time.Millisecond}
	c := &http.Client{Transport: tr}
	post(t, c, s.URL, "a")
	post(t, c, s.URL, "b")
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections within the idle timeout, want 1", n)
	}
	time.Sleep(150 * time.Millisecond)
	post(t, c, s.URL, "c")
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a connection idle past the timeout was reused", n)
	}
	waitFor(t, "the expired connection to be closed", func() bool { return s.closed.Load() == 1 })
}

func TestLightTransportBodies(t *testing.T) {
	large := strings.Repeat("0123456789abcdef", 1<<17) // 2 MiB
	s := newConnServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			for i := range 5 {
				fmt.Fprintf(w, "part%d;", i)
				http.NewResponseController(w).Flush() // no Content-Length: chunked
			}
		case "/length":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "/empty":
			w.Header().Set("Content-Length", "0")
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		case "/large":
			io.WriteString(w, large)
		case "/large-chunked":
			for i := 0; i < len(large); i += 100_000 {
				io.WriteString(w, large[i:min(i+100_000, len(large))])
				http.NewResponseController(w).Flush()
			}
		}
	}), 0)
	tr := &lightTransport{idleTimeout: time.Minute}
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/chunked", 200, "part0;part1;part2;part3;part4;"},
		{"GET", "/length", 200, "hello"},
		{"HEAD", "/length", 200, ""},
		{"POST", "/empty", 200, ""},
		{"GET", "/204", 204, ""},
		{"GET", "/304", 304, ""},
		{"GET", "/large", 200, large},
		{"GET", "/large-chunked", 200, large},
		{"GET", "/length", 200, "hello"},
	} {
		req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || string(data) != tc.want {
			t.Fatalf("%s %s: %d, %d bytes (%.20q), %v; want %d, %d bytes", tc.method, tc.path, resp.StatusCode, len(data), data, err, tc.status, len(tc.want))
		}
		if n := s.accepted.Load(); n != 1 {
			t.Fatalf("after %s %s: %d connections, want 1", tc.method, tc.path, n)
		}
	}

	// Closing a body unread keeps the connection when little is left, not when much is.
	for _, tc := range []struct {
		path  string
		reuse bool
	}{{"/chunked", true}, {"/length", true}, {"/large", false}} {
		before := s.accepted.Load()
		resp, err := c.Get(s.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: a read after Close succeeded", tc.path)
		}
		if idle := tr.idleConns(s.addr()); (idle == 1) != tc.reuse {
			t.Errorf("%s closed unread: %d idle connections, want reuse %v", tc.path, idle, tc.reuse)
		}
		post(t, c, s.URL+"/length", "")
		if reused := s.accepted.Load() == before; reused != tc.reuse {
			t.Errorf("%s closed unread: connection reused %v, want %v", tc.path, reused, tc.reuse)
		}
	}
}

func TestLightTransportConcurrent(t *testing.T) {
	s := newConnServer(t, http.HandlerFunc(echo), 0)
	tr := &lightTransport{idleTimeout: time.Minute, maxIdle: 1000}
	c := &http.Client{Transport: tr}
	const goroutines, each = 300, 5
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				body := fmt.Sprintf("g%d-%d", g, i)
				req, _ := http.NewRequest(http.MethodPost, s.URL, bytes.NewReader([]byte(body)))
				resp, err := c.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf(`POST  %s ae=""`, body); err != nil || string(data) != want {
					errs <- fmt.Errorf("got %q, %v; want %q", data, err, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	accepted := s.accepted.Load()
	if accepted > goroutines {
		t.Errorf("%d connections for %d goroutines", accepted, goroutines)
	}
	if idle := tr.idleConns(s.addr()); int64(idle) != accepted {
		t.Errorf("%d idle connections of %d", idle, accepted)
	}

	// CloseIdleConnections closes them all.
	tr.CloseIdleConnections()
	if idle := tr.idleConns(s.addr()); idle != 0 {
		t.Errorf("%d idle connections after CloseIdleConnections", idle)
	}
	waitFor(t, "the server to see every connection closed", func() bool { return s.closed.Load() == accepted })
}

func TestLightTransportRefusesOtherSchemes(t *testing.T) {
	c := &http.Client{Transport: &lightTransport{}}
	if resp, err := c.Get("https://127.0.0.1:1/"); err == nil {
		resp.Body.Close()
		t.Fatal("an https URL was accepted")
	}
}

func TestNewClientPicksTheTransport(t *testing.T) {
	// 127.0.0.1 is never sent through a proxy from the environment.
	opts := Options{ServerURL: "http://127.0.0.1:6543", Workers: 10, IdleConnTimeout: time.Minute, HTTPTimeout: 7 * time.Second}
	c, _ := newClient(opts)
	lt, ok := c.Transport.(*lightTransport)
	if !ok || c.Timeout != 0 || lt.timeout != 7*time.Second || lt.idleTimeout != time.Minute || lt.maxIdle != 26 {
		t.Errorf("http: %T %+v, client timeout %v", c.Transport, c.Transport, c.Timeout)
	}
	opts.ServerURL = "https://127.0.0.1:6543"
	c, _ = newClient(opts)
	if ht, ok := c.Transport.(*http.Transport); !ok || c.Timeout != 7*time.Second || ht.IdleConnTimeout != time.Minute {
		t.Errorf("https: %T, client timeout %v", c.Transport, c.Timeout)
	}
}

// BenchmarkTransport compares lightTransport with net/http's on many goroutines each sending
// small POSTs over kept-alive connections, as a fleet does (the server runs in the same process,
// so ns/op counts both sides). Run with -cpu 1 to see a fleet pinned to one core.
func BenchmarkTransport(b *testing.B) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"duration":0.001,"task_alive":true}`)
	}))
	defer s.Close()
	nethttp := http.DefaultTransport.(*http.Transport).Clone()
	nethttp.MaxIdleConnsPerHost = 1000
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"light", &lightTransport{idleTimeout: time.Minute, maxIdle: 1000}}, {"nethttp", nethttp}} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: tc.rt}
			body := []byte(`{"password":"p","run_id":"0123456789abcdef01234567","task_id":3}`)
			b.SetParallelism(50)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/beat", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
