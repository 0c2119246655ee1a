package fleet

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// This file writes the fleet's requests and reads their replies' headers without net/http's
// general code for the common case, a worker call: a POST or GET with at most one header of
// its own and a body of known length, answered by an HTTP/1.1 reply with a Content-Length and
// plain headers. The bytes written and the *http.Response read are those of Request.Write and
// http.ReadResponse (wire_test.go checks it); anything else goes to them. The request goes out
// in one write, its body included, and the reply's header is parsed from what one read brought,
// with one allocation for its strings.

// maxKeptWriteBuffer is the largest request buffer a connection keeps between requests; a
// larger body (a PGN upload) that can hand out its bytes (io.WriterTo) is written from them,
// after the header, in the same system call (writev).
const maxKeptWriteBuffer = 16 << 10

// writeRequest writes req on c: in one write when appendHead covers it, else with Request.Write.
// It closes req.Body.
func (c *lightConn) writeRequest(req *http.Request) error {
	head, ok := appendHead(c.wbuf[:0], req)
	if !ok {
		if c.bw == nil {
			c.bw = bufio.NewWriter(c.nc)
		}
		if err := req.Write(c.bw); err != nil {
			return err
		}
		return c.bw.Flush()
	}
	var err error
	if wt, isWT := req.Body.(io.WriterTo); isWT && req.ContentLength > maxKeptWriteBuffer {
		err = writeWithBody(c.nc, head, wt, req.ContentLength)
	} else {
		if req.ContentLength > 0 {
			head, err = appendBody(head, req.Body, req.ContentLength)
		}
		if err == nil {
			_, err = c.nc.Write(head)
		}
	}
	if cap(head) <= maxKeptWriteBuffer {
		c.wbuf = head[:0]
	} else {
		c.wbuf = nil
	}
	if req.Body != nil {
		req.Body.Close()
	}
	return err
}

// appendHead appends req's request line and header as Request.Write writes them; ok is false
// (nothing appended) when req is not a plain worker call (see the top of the file).
func appendHead(b []byte, req *http.Request) (_ []byte, ok bool) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if (req.Method != http.MethodPost && req.Method != http.MethodGet) || !plainHost(host) || req.Close ||
		len(req.TransferEncoding) > 0 || req.Trailer != nil || len(req.Header) > 1 || req.ContentLength < 0 ||
		(req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody) || (req.ContentLength > 0 && req.Body == nil) {
		return b, false
	}
	uri := req.URL.RequestURI()
	if !plainText(uri) || req.URL.Scheme != "http" {
		return b, false
	}
	var key, value string
	for k, v := range req.Header {
		if len(v) != 1 || !token(k) || !plainText(v[0]) || (len(v[0]) > 0 && (v[0][0] == ' ' || v[0][len(v[0])-1] == ' ')) {
			return b, false
		}
		switch textproto.CanonicalMIMEHeaderKey(k) {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			return b, false
		}
		key, value = k, v[0]
	}
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: Go-http-client/1.1\r\n"...)
	if req.ContentLength > 0 || req.Method == http.MethodPost {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	if key != "" {
		b = append(b, key...)
		b = append(b, ": "...)
		b = append(b, value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...), true
}

// appendBody appends exactly n bytes of body, as Request.Write sends them: a body of another
// length is an error.
func appendBody(b []byte, body io.Reader, n int64) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, n)...)
	got, err := io.ReadFull(body, b[start:])
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return b, bodyLengthError(n, int64(got))
	}
	if err != nil {
		return b, err
	}
	if extra, _ := io.Copy(io.Discard, body); extra > 0 {
		return b, bodyLengthError(n, n+extra)
	}
	return b, nil
}

func bodyLengthError(want, got int64) error {
	return fmt.Errorf("http: ContentLength=%d with Body length %d", want, got)
}

// writeWithBody writes head and then the n bytes of body on nc, head and the body's first
// piece (a bytes.Reader's only one) in one system call. A body of another length is an
// error, as Request.Write makes it, and nothing of it past n is written.
func writeWithBody(nc net.Conn, head []byte, body io.WriterTo, n int64) error {
	w := &headedWriter{nc: nc, head: head, n: n, left: n}
	if _, err := body.WriteTo(w); err != nil {
		return err
	}
	if w.left > 0 {
		return bodyLengthError(n, n-w.left)
	}
	return nil
}

// headedWriter writes its head before the first piece, in the same writev, and at most left
// bytes.
type headedWriter struct {
	nc      net.Conn
	head    []byte
	n, left int64 // the body's length, and what is left of it to write
}

func (w *headedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.left {
		return 0, bodyLengthError(w.n, w.n-w.left+int64(len(p)))
	}
	var err error
	if w.head != nil {
		bufs := net.Buffers{w.head, p}
		_, err = bufs.WriteTo(w.nc)
		w.head = nil
	} else {
		_, err = w.nc.Write(p)
	}
	if err != nil {
		return 0, err
	}
	w.left -= int64(len(p))
	return len(p), nil
}

// plainHost is a host[:port] of letters, digits, dots, dashes and colons (an IPv6 address in
// brackets too), which Request.Write writes as it is.
func plainHost(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// plainText has only printable ASCII.
func plainText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// token is a header name of letters, digits and dashes.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// readResponse reads the reply to req from br: with parseResponse when the reply's whole header
// is already buffered and it covers it, else with http.ReadResponse. The body of a reply
// parseResponse read is fixed, which must not be in use.
func readResponse(br *bufio.Reader, req *http.Request, fixed *fixedBody) (*http.Response, error) {
	if req.Method == http.MethodPost || req.Method == http.MethodGet {
		if buffered, _ := br.Peek(br.Buffered()); len(buffered) > 0 {
			if resp, n := parseResponse(buffered); resp != nil {
				_, _ = br.Discard(n)
				resp.Request = req
				if resp.ContentLength > 0 {
					*fixed = fixedBody{r: br, n: resp.ContentLength}
					resp.Body = fixed
				}
				return resp, nil
			}
		}
	}
	return http.ReadResponse(br, req)
}

// commonKeys are the header names replies have, canonical, which parseResponse does not copy.
var commonKeys = [...]string{"Content-Type", "Content-Length", "Date", "Server", "Cache-Control", "Vary",
	"X-Content-Type-Options", "Expires", "Last-Modified", "Etag", "Set-Cookie", "Retry-After"}

// parseResponse parses the header of an HTTP/1.1 reply with a Content-Length, a status from 200
// to 599 but 204 and 304, and header lines http.ReadResponse would read as they are (no
// continuation, no Connection, Transfer-Encoding, Trailer or Pragma, printable ASCII). n is the
// header's length; resp is nil when data does not hold such a header whole. resp.Body is
// http.NoBody; the caller sets it for a non-empty body.
func parseResponse(data []byte) (resp *http.Response, n int) {
	end := bytes.Index(data, []byte("\r\n\r\n"))
	if end < 0 || !bytes.HasPrefix(data, []byte("HTTP/1.1 ")) {
		return nil, 0
	}
	head := data[:end+2] // every line with its CRLF
	for _, c := range head {
		if (c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c >= 0x7f {
			return nil, 0
		}
	}
	lineEnd := bytes.Index(head, []byte("\r\n"))
	status := head[len("HTTP/1.1 "):lineEnd]
	for len(status) > 0 && status[0] == ' ' {
		status = status[1:]
	}
	if len(status) < 3 || (len(status) > 3 && status[3] != ' ') || bytes.IndexByte(head[:lineEnd], '\n') >= 0 {
		return nil, 0
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 200 || code > 599 || code == 204 || code == 304 {
		return nil, 0
	}
	// One string for the status and every header value; the lines, without the status line.
	text := string(head)
	lines := head[lineEnd+2:]
	count := bytes.Count(lines, []byte("\r\n"))
	if bytes.Count(lines, []byte("\n")) != count || bytes.IndexByte(lines, '\r') != bytes.Index(lines, []byte("\r\n")) {
		return nil, 0 // a bare CR or LF
	}
	header := make(http.Header, count)
	values := make([]string, count)
	contentLength := int64(-1)
	for off := lineEnd + 2; off < len(head); {
		eol := off + bytes.Index(head[off:], []byte("\r\n"))
		line := head[off:eol]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !token(text[off:off+colon]) {
			return nil, 0
		}
		key := canonicalKey(line[:colon], text[off:off+colon])
		v := textproto.TrimString(text[off+colon+1 : eol])
		switch key {
		case "Connection", "Transfer-Encoding", "Trailer", "Pragma", "Keep-Alive":
			return nil, 0
		case "Content-Length":
			if contentLength >= 0 || len(v) == 0 || len(v) > 15 || !digits(v) {
				return nil, 0
			}
			contentLength, _ = strconv.ParseInt(v, 10, 64)
		}
		if old, ok := header[key]; ok {
			header[key] = append(old, v)
		} else {
			values[0] = v
			header[key] = values[:1:1]
			values = values[1:]
		}
		off = eol + 2
	}
	if contentLength < 0 {
		return nil, 0
	}
	return &http.Response{Status: strings.TrimLeft(text[len("HTTP/1.1 "):lineEnd], " "), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: header, Body: http.NoBody,
		ContentLength: contentLength}, end + 4
}

// canonicalKey is the canonical form of the header name b (s as a string): a commonKeys
// constant when it is one, else textproto's.
func canonicalKey(b []byte, s string) string {
	for _, k := range commonKeys {
		if string(b) == k {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(s)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// fixedBody is a reply's body of n bytes on a connection, read as net/http reads one: the
// connection's end before the n-th byte is io.ErrUnexpectedEOF.
type fixedBody struct {
	r *bufio.Reader
	n int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	k, err := b.r.Read(p)
	b.n -= int64(k)
	switch {
	case err == io.EOF && b.n > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && b.n == 0:
		err = io.EOF
	}
	return k, err
}

func (b *fixedBody) Close() error { return nil }
