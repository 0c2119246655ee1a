package fleet

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A request goes out byte for byte as Request.Write writes it, whatever of it appendHead
// takes; and it takes the worker's calls.
func TestWriteRequestIsRequestWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	urls := []string{"http://127.0.0.1:8000/api/beat", "http://localhost/api/update_task", "http://[::1]:80/api/x?y=1&z",
		"http://h.example:9/a%20b", "http://h.example/é", "http://h.example/", "http://h.example"}
	headers := []http.Header{nil, {}, {"Content-Type": {"application/json"}}, {"content-type": {"a/b"}},
		{"X-A": {"1"}, "X-B": {"2"}}, {"User-Agent": {"me"}}, {"X-A": {" padded "}}, {"X-A": {"a\nb"}}, {"X-A": {"1", "2"}},
		{"Cookie": {"a=b"}}, {"X-Empty": {""}}, {"Bad Key": {"v"}}}
	taken := 0
	for i := range 5000 {
		method := []string{http.MethodPost, http.MethodGet, http.MethodPut}[rng.IntN(3)]
		url := urls[rng.IntN(len(urls))]
		header := headers[rng.IntN(len(headers))]
		body := bytes.Repeat([]byte("x"), []int{0, 1, 600, 5000, 40000}[rng.IntN(5)])
		lie := []int64{0, 0, 0, 0, 1, -1, -20000}[rng.IntN(7)] // a ContentLength that is not the body's
		host := []string{"", "", "other:81", "a b"}[rng.IntN(4)]
		closeIt := rng.IntN(10) == 0
		mk := func() *http.Request {
			var r io.Reader
			if len(body) > 0 || rng.IntN(2) == 0 {
				r = bytes.NewReader(body)
			}
			req, err := http.NewRequest(method, url, r)
			if err != nil {
				t.Fatal(err)
			}
			req.Header, req.Host, req.Close = header.Clone(), host, closeIt
			if req.ContentLength > 0 {
				req.ContentLength += lie
			}
			return req
		}
		if _, ok := appendHead(nil, mk()); !ok {
			continue
		}
		taken++
		var want bytes.Buffer
		wantErr := mk().Write(&want)
		// Written on a connection, in one write, a large body from its own bytes: the same bytes.
		conn := &recordingConn{}
		err := (&lightConn{nc: conn}).writeRequest(mk())
		if (err == nil) != (wantErr == nil) || (err == nil && !bytes.Equal(conn.b.Bytes(), want.Bytes())) {
			t.Fatalf("request %d (%s %s %v host %q, %d bytes, CL%+d) on a connection:\n got %q (%v)\nwant %q (%v)", i, method, url,
				header, host, len(body), lie, conn.b.Bytes(), err, want.Bytes(), wantErr)
		}
	}
	if taken < 1000 {
		t.Errorf("appendHead took %d requests of 5000; want the plain ones", taken)
	}
}

// recordingConn is a connection that keeps what is written on it.
type recordingConn struct {
	net.Conn
	b bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) { return c.b.Write(p) }

// A reply reads as http.ReadResponse reads it, header, status and body, whether parseResponse
// takes it or not.
func TestReadResponseIsHTTPReadResponse(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	statuses := []string{"HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request", "HTTP/1.1 503 Service Unavailable", "HTTP/1.1 204 No Content",
		"HTTP/1.1 200", "HTTP/1.1  200 OK", "HTTP/1.1 200 OK ", "HTTP/1.0 200 OK", "HTTP/1.1 100 Continue", "HTTP/1.1 2000 OK",
		"HTTP/1.1 200OK", "HTTP/1.1 +20 OK", "HTTP/2 200 OK", "HTTP/1.1 304 Not Modified"}
	lines := []string{"Content-Type: application/json", "Date: Sat, 28 Nov 2026 08:00:00 GMT", "content-type: text/plain",
		"X-Weird-Header:   spaced  ", "X-Tab:\tv\t", "Set-Cookie: a=b", "Set-Cookie: c=d", "Connection: close",
		"Connection: keep-alive", "Transfer-Encoding: chunked", "Pragma: no-cache", " folded", "Bad Key: v", "NoColon",
		"Empty:", "X-Ünicode: v", "X-A: é", "Server: x\ry", "Retry-After: 3", "Foo_Bar: 1", "Content-Length: 007"}
	bodies := []string{"", `{"duration":0.0004,"task_alive":true}`, strings.Repeat("y", 5000)}
	fast := 0
	for i := range 20000 {
		var b strings.Builder
		b.WriteString(statuses[rng.IntN(len(statuses))] + "\r\n")
		for range rng.IntN(5) {
			b.WriteString(lines[rng.IntN(len(lines))] + "\r\n")
		}
		body := bodies[rng.IntN(len(bodies))]
		switch rng.IntN(8) {
		case 0: // none
		case 1:
			b.WriteString("Content-Length: " + []string{"x", "", "1, 2", "-1", "99999999999999999999"}[rng.IntN(5)] + "\r\n")
		case 2:
			b.WriteString("Content-Length: 3\r\nContent-Length: 3\r\n")
		default:
			b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
		}
		b.WriteString("\r\n" + body)
		text := b.String()
		if rng.IntN(10) == 0 { // cut short
			text = text[:rng.IntN(len(text)+1)]
		}
		method := []string{http.MethodPost, http.MethodGet, http.MethodHead}[rng.IntN(3)]
		req, _ := http.NewRequest(method, "http://h/api/x", nil)
		if resp, _ := parseResponse([]byte(text)); resp != nil && method != http.MethodHead {
			fast++
		}
		got, gotBody, gotErr := readAll(func(br *bufio.Reader, req *http.Request) (*http.Response, error) {
			return readResponse(br, req, new(fixedBody))
		}, text, req)
		want, wantBody, wantErr := readAll(http.ReadResponse, text, req)
		if (gotErr == nil) != (wantErr == nil) || gotBody != wantBody || !sameResponse(got, want) {
			t.Fatalf("reply %d %q to %s:\n got %+v %q (%v)\nwant %+v %q (%v)", i, text, method, got, gotBody, gotErr, want, wantBody, wantErr)
		}
	}
	if fast < 1000 {
		t.Errorf("parseResponse took %d replies of 20000; want the plain ones", fast)
	}
}

// readAll reads a reply from text with read, and its body.
func readAll(read func(*bufio.Reader, *http.Request) (*http.Response, error), text string, req *http.Request) (*http.Response, string, error) {
	resp, err := read(bufio.NewReader(strings.NewReader(text)), req)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func sameResponse(a, b *http.Response) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.StatusCode == b.StatusCode && a.Proto == b.Proto && a.ProtoMajor == b.ProtoMajor &&
		a.ProtoMinor == b.ProtoMinor && reflect.DeepEqual(a.Header, b.Header) && a.ContentLength == b.ContentLength &&
		a.Close == b.Close && reflect.DeepEqual(a.TransferEncoding, b.TransferEncoding) && reflect.DeepEqual(a.Trailer, b.Trailer) &&
		a.Request == b.Request && (a.Body == http.NoBody) == (b.Body == http.NoBody)
}

// The body of a reply parsed by readResponse lives in its connection: once read (or closed) and
// the connection reused, it reads nothing of the next reply, which reads whole.
func TestReplyBodyDoesNotReadTheNextReply(t *testing.T) {
	n := 0
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"reply":`+strconv.Itoa(n)+`}`)
	}))
	conns := 0
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns++
		}
	}
	s.Start()
	defer s.Close()
	c := &http.Client{Transport: &lightTransport{idleTimeout: time.Minute}}
	get := func() *http.Response {
		resp, err := c.Post(s.URL+"/api/beat", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := get()
	if body, err := io.ReadAll(first.Body); err != nil || string(body) != `{"reply":1}` {
		t.Fatalf("first reply %q, %v", body, err)
	}
	for _, finish := range []func(io.ReadCloser){func(b io.ReadCloser) { b.Close() }, func(io.ReadCloser) {}} {
		second := get()
		var p [64]byte
		if k, err := first.Body.Read(p[:]); k != 0 || err == nil {
			t.Errorf("the first body read %q, %v after the connection was reused", p[:k], err)
		}
		body, err := io.ReadAll(second.Body)
		if err != nil || !strings.HasPrefix(string(body), `{"reply":`) {
			t.Errorf("next reply %q, %v", body, err)
		}
		finish(first.Body)
		first = second
	}
	if conns != 1 {
		t.Errorf("%d connections; want one, reused", conns)
	}
}
