package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkNetHTTPFloor is what net/http allocates and costs a request on its own, under the
// fleet's request head (Host, User-Agent, Content-Length, Content-Type) and a beat-sized body on
// kept-alive loopback connections, for three handlers: one that reads the body into a reused
// buffer and writes a fixed reply, the same with the two headers every Shoal reply carries (set
// as Shoal sets them, from shared slices), and the bench's yardstick (bareHandler). The clients
// write prepared bytes and read replies into buffers of their own, so B/op is the server's.
// It bounds from below what any handler on net/http allocates: the server's target of 3 kB a
// request is judged against it in docs/benchmarks.
func BenchmarkNetHTTPFloor(b *testing.B) {
	bodies, err := yardstickBodies(1)
	if err != nil {
		b.Fatal(err)
	}
	body := bodies[0]
	reply := []byte(`{"task_alive":true,"duration":0.0}`)
	pool := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	drain := func(r *http.Request) {
		buf := pool.Get().(*bytes.Buffer)
		buf.Reset()
		_, _ = buf.ReadFrom(r.Body)
		pool.Put(buf)
	}
	jsonType, nosniff := []string{"application/json"}, []string{"nosniff"}
	for _, h := range []struct {
		name    string
		handler http.Handler
	}{
		{"read body, fixed reply", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			drain(r)
			_, _ = w.Write(reply)
		})},
		{"read body, fixed reply, two headers", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			drain(r)
			hdr := w.Header()
			hdr["X-Content-Type-Options"] = nosniff
			hdr["Content-Type"] = jsonType
			_, _ = w.Write(reply)
		})},
		{"yardstick", bareHandler()},
	} {
		b.Run(h.name, func(b *testing.B) { floorRun(b, h.handler, body) })
	}
}

// floorRun serves handler on a loopback port and sends it b.N requests with body over 16
// kept-alive connections.
func floorRun(b *testing.B, handler http.Handler, body []byte) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Shutdown(context.Background())
	req := fmt.Appendf(nil, "POST /api/beat HTTP/1.1\r\nHost: %s\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: %d\r\nContent-Type: application/json\r\n\r\n%s",
		l.Addr(), len(body), body)
	const conns = 16
	clients := make([]*floorClient, conns)
	for i := range clients {
		if clients[i], err = dialFloor(l.Addr().String(), req); err != nil {
			b.Fatal(err)
		}
		defer clients[i].conn.Close()
		if err := clients[i].call(); err != nil { // the connection's first request, outside the count
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range clients {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Go(func() {
			for range n {
				if err := c.call(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// floorClient is one kept-alive connection that sends a prepared request and reads each reply
// without allocating.
type floorClient struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte
	buf  []byte
}

func dialFloor(addr string, req []byte) (*floorClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &floorClient{conn: c, r: bufio.NewReaderSize(c, 4096), req: req, buf: make([]byte, 4096)}, nil
}

// call sends the request and reads a 200 reply with a Content-Length.
func (c *floorClient) call() error {
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	length, status := -1, 0
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case status == 0:
			if len(line) < 12 {
				return fmt.Errorf("status line %q", line)
			}
			status, _ = strconv.Atoi(string(line[9:12]))
		case len(line) == 0:
			if status != http.StatusOK || length < 0 {
				return fmt.Errorf("status %d, content length %d", status, length)
			}
			_, err := io.ReadFull(c.r, c.buf[:length])
			return err
		default:
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				length, _ = strconv.Atoi(string(v))
			}
		}
		if status == 0 {
			return errors.New("no status")
		}
	}
}
