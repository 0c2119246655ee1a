package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxDrain is how much of a reply's unread body Close reads to keep the connection: a bigger
// remainder is not worth reading, and the connection is closed instead.
const maxDrain = 64 << 10

// lightTransport is the fleet's HTTP/1.1 client transport for plain http:// servers. It does each
// round trip in the calling goroutine: it takes an idle connection (or dials one), writes the
// request, reads the reply's header, and returns a reply whose body gives the connection back
// once read to its end or closed. It starts no goroutine per connection or per request, unlike
// net/http's transport, whose two goroutines per kept-alive connection (and the channel handoffs
// of every request between them and the caller) cost a fleet of thousands of workers on one core
// as much CPU as the server spends, and scheduling delays that land in the latencies measured.
//
// It does not do TLS, proxies, HTTP/2, compression (it sends no Accept-Encoding, so the server
// does not compress) or 1xx replies other than skipping them. Safe for concurrent use.
type lightTransport struct {
	// idleTimeout is how long a connection may wait in the pool; an older one is closed
	// instead of reused (0: no limit). It must be shorter than the server's idle timeout.
	idleTimeout time.Duration
	// maxIdle bounds the idle connections kept per host:port (0: no bound).
	maxIdle int
	// timeout bounds each round trip, the reply's body included (0: no bound): an http.Client's
	// Timeout done with the connection's deadlines, because http.Client, given a RoundTripper
	// that is not net/http's own, enforces its Timeout with a goroutine and a timer per request.
	timeout time.Duration

	// lastAddr is the URL host of the last request and its host:port (hostPort).
	lastAddr atomic.Pointer[[2]string]

	mu   sync.Mutex
	idle map[string][]*lightConn // per host:port, a stack: the most recently used on top
}

// lightConn is one connection with its buffers: wbuf for the requests writeRequest writes in
// one piece, bw (made when first needed) for those Request.Write writes.
type lightConn struct {
	nc   net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	wbuf []byte
	// body is the body of the reply being read, when readResponse parsed its header: a
	// connection has one reply at a time, and is put back in the pool only once its body is
	// read or closed, never to be read again.
	body   fixedBody
	kill   func() // closes nc: what a cancelled context does, made once per connection
	addr   string
	idleAt time.Time // when it was last put in the pool
}

// timeoutError is a round trip that outlasted lightTransport.timeout. Like the error of an
// http.Client's Timeout, it is a net.Error whose Timeout is true and it matches
// context.DeadlineExceeded.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("no complete reply within %v (fleet HTTP timeout)", e.after)
}
func (e *timeoutError) Timeout() bool        { return true }
func (e *timeoutError) Temporary() bool      { return true }
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

var errBodyClosed = errors.New("fleet transport: read on a closed reply body")

// RoundTrip implements http.RoundTripper.
//
// A request that fails on a connection taken from the pool before any byte of the reply arrived
// (EOF, reset or broken pipe: the server closed the connection while it was idle) is sent once
// more on a new connection, if its body can be had again (GetBody, which http.NewRequest sets
// for a bytes.Reader) or it has none. Such a request may have reached a server that then closed
// without answering it (a crash in the handler), so the retry can deliver it twice. That is the
// risk the worker already takes when it resends a call that got no reply, and update_task is
// safe with it: it carries a task's cumulative stats, and the server acknowledges a repeat of
// the stats it holds as a beat (scheduler/update.go); a repeated request_task can leave a task
// for the dead-task reclaim. A request is never sent again once reply bytes arrived, after a
// timeout or a cancelled context, or on a connection dialed for it.
func (t *lightTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		closeRequestBody(req)
		return nil, fmt.Errorf("fleet transport: unsupported URL %v: want http://HOST[:PORT]/...", req.URL)
	}
	if err := ctx.Err(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	var deadline time.Time
	if t.timeout > 0 {
		deadline = time.Now().Add(t.timeout)
	}
	addr := t.hostPort(req)
	out := req
	for retried := false; ; retried = true {
		// The retry dials: when the server restarts or closes its idle connections, every
		// pooled one may be dead, and a retry on the next would fail the same way.
		c, reused, err := t.getConn(ctx, addr, deadline, retried)
		if err != nil {
			closeRequestBody(out)
			return nil, t.wrapErr(ctx, err)
		}
		// A cancelled ctx closes the connection, which ends any read or write on it at once.
		stop := func() bool { return true }
		if ctx.Done() != nil {
			stop = context.AfterFunc(ctx, c.kill)
		}
		resp, replied, err := c.exchange(out)
		if err == nil {
			return t.deliver(ctx, req, resp, c, stop), nil
		}
		stop()
		c.nc.Close()
		if retried || !reused || replied || ctx.Err() != nil || !closedUnderUs(err) {
			return nil, t.wrapErr(ctx, err)
		}
		next, ok := rewound(req)
		if !ok {
			return nil, t.wrapErr(ctx, err)
		}
		out = next
	}
}

// exchange writes req on c and reads the reply's header. replied says whether any byte of a
// reply arrived.
func (c *lightConn) exchange(req *http.Request) (resp *http.Response, replied bool, err error) {
	if err := c.writeRequest(req); err != nil { // closes req.Body
		return nil, false, err
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, false, err
	}
	for {
		resp, err := readResponse(c.br, req, &c.body)
		if err != nil {
			return nil, true, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // informational (100 Continue, 103 Early Hints): the final reply follows
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, true, errors.New("fleet transport: the server switched protocols")
		}
		return resp, true, nil
	}
}

// deliver hands resp back to the caller of RoundTrip, with a body that gives c back to the pool
// (or closes it) when read to its end or closed. stop unregisters the cancellation of c.
func (t *lightTransport) deliver(ctx context.Context, req *http.Request, resp *http.Response, c *lightConn, stop func() bool) *http.Response {
	resp.Request = req
	reuse := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		if stop() && reuse {
			t.putIdle(c)
		} else {
			c.nc.Close()
		}
		return resp
	}
	resp.Body = &lightBody{body: resp.Body, t: t, c: c, ctx: ctx, stop: stop, reuse: reuse}
	return resp
}

// lightBody is a reply's body. Like most readers, it is not safe for concurrent use: Close must
// not be called during a Read (to abort a read, cancel the request's context).
type lightBody struct {
	body  io.ReadCloser // http.ReadResponse's
	t     *lightTransport
	c     *lightConn // nil once given back or closed
	ctx   context.Context
	stop  func() bool
	reuse bool  // the reply and the request allow another request on c
	err   error // what every Read returns once the body is done (io.EOF or a failure)
}

func (b *lightBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.err = io.EOF
		b.release(true)
	case err != nil:
		err = b.t.wrapErr(b.ctx, err)
		b.err = err
		b.release(false)
	}
	return n, err
}

// Close reads what is left of the body, up to maxDrain, to keep the connection; with more left,
// or if that read fails, it closes the connection.
func (b *lightBody) Close() error {
	if b.c != nil {
		n, err := io.Copy(io.Discard, io.LimitReader(b.body, maxDrain+1))
		b.release(err == nil && n <= maxDrain)
	}
	b.err = errBodyClosed
	return nil
}

// release gives the connection back to the pool if the whole reply was read (ok), the exchange
// allows reuse and the context's cancellation did not close it; otherwise it closes it.
func (b *lightBody) release(ok bool) {
	c := b.c
	if c == nil {
		return
	}
	b.c = nil
	if b.stop() && ok && b.reuse {
		b.t.putIdle(c)
		return
	}
	c.nc.Close()
}

// getConn takes the most recently used idle connection to addr, or dials one (always, if
// fresh). Idle connections that have waited idleTimeout or longer are closed (pruneLocked).
func (t *lightTransport) getConn(ctx context.Context, addr string, deadline time.Time, fresh bool) (c *lightConn, reused bool, err error) {
	t.mu.Lock()
	stale := t.pruneLocked(addr, time.Now())
	if s := t.idle[addr]; len(s) > 0 && !fresh {
		c = s[len(s)-1]
		s[len(s)-1] = nil
		t.idle[addr] = s[:len(s)-1]
	}
	t.mu.Unlock()
	for _, sc := range stale {
		sc.nc.Close()
	}
	if c != nil {
		if err := c.nc.SetDeadline(deadline); err != nil {
			c.nc.Close()
			return nil, false, err
		}
		return c, true, nil
	}
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Deadline: deadline}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if err := nc.SetDeadline(deadline); err != nil {
		nc.Close()
		return nil, false, err
	}
	c = &lightConn{nc: nc, br: bufio.NewReader(nc), addr: addr}
	c.kill = func() { c.nc.Close() }
	return c, false, nil
}

// putIdle puts c on top of its pool, unless the pool is full. Connections that have waited
// idleTimeout or longer are closed on the way (pruneLocked).
func (t *lightTransport) putIdle(c *lightConn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*lightConn)
	}
	drop := t.pruneLocked(c.addr, c.idleAt)
	s := t.idle[c.addr]
	if t.maxIdle > 0 && len(s) >= t.maxIdle {
		drop = append(drop, c)
	} else {
		s = append(s, c)
	}
	t.idle[c.addr] = s
	t.mu.Unlock()
	for _, dc := range drop {
		dc.nc.Close()
	}
}

// pruneLocked takes out of addr's pool the connections that have waited idleTimeout or longer
// (the oldest, at the bottom of the stack) and returns them, to be closed once t.mu is released.
func (t *lightTransport) pruneLocked(addr string, now time.Time) []*lightConn {
	s := t.idle[addr]
	i := 0
	for t.idleTimeout > 0 && i < len(s) && now.Sub(s[i].idleAt) >= t.idleTimeout {
		i++
	}
	if i == 0 {
		return nil
	}
	stale := slices.Clone(s[:i])
	clear(s[:i])
	t.idle[addr] = s[i:]
	return stale
}

// CloseIdleConnections closes every idle connection. Connections in use stay open, and go back
// to the pool when their reply is read.
func (t *lightTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, s := range idle {
		for _, c := range s {
			c.nc.Close()
		}
	}
}

// idleConns is the number of idle connections to addr.
func (t *lightTransport) idleConns(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle[addr])
}

// wrapErr is err as RoundTrip and Read return it: the context's error when the context ended
// (its cancellation closed the connection), a timeoutError when the timeout passed.
func (t *lightTransport) wrapErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if t.timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return &timeoutError{after: t.timeout}
	}
	return err
}

// closedUnderUs says whether err is the failure of a connection the server had closed: the
// end of the stream, a reset or a broken pipe.
func closedUnderUs(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// rewound is req with its body from the start, to send it again; false when its body cannot be
// had again.
func rewound(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	out := req.Clone(req.Context())
	out.Body = body
	return out, true
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hostPort is hostPort(req), from the last request's when req is to the same URL host: a fleet
// calls one server.
func (t *lightTransport) hostPort(req *http.Request) string {
	if last := t.lastAddr.Load(); last != nil && last[0] == req.URL.Host {
		return last[1]
	}
	addr := hostPort(req)
	t.lastAddr.Store(&[2]string{req.URL.Host, addr})
	return addr
}

// hostPort is req's server as host:port, with port 80 when the URL names none.
func hostPort(req *http.Request) string {
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(req.URL.Hostname(), port)
}
