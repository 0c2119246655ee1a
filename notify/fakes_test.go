package notify

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// receiver is an in-process webhook receiver that records what it is sent, and can be told to
// fail.
type receiver struct {
	srv   *httptest.Server
	conns atomic.Int64 // connections accepted
	fail  atomic.Bool  // answer 500 while set
	mu    sync.Mutex
	got   []map[string]any
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		var body map[string]any
		b, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, body)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) received() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.got...)
}

// fakeSMTP is a small SMTP server on a loopback port that accepts every message and keeps it.
type fakeSMTP struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	msgs []smtpMessage
}

type smtpMessage struct {
	from, to string
	data     string
}

func newFakeSMTP(t *testing.T) *fakeSMTP {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSMTP{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *fakeSMTP) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// serve speaks just enough SMTP for net/smtp: a greeting, EHLO, MAIL, RCPT, DATA, QUIT.
func (f *fakeSMTP) serve(c net.Conn) {
	r := textproto.NewReader(bufio.NewReader(c))
	say := func(s string) { _, _ = io.WriteString(c, s+"\r\n") }
	say("220 fake ESMTP")
	var m smtpMessage
	for {
		line, err := r.ReadLine()
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
		switch {
		case cmd == "EHLO":
			say("250-fake")
			say("250 8BITMIME")
		case cmd == "HELO", cmd == "RSET", cmd == "NOOP":
			say("250 ok")
		case strings.HasPrefix(strings.ToUpper(line), "MAIL FROM:"):
			m.from = line[len("MAIL FROM:"):]
			say("250 ok")
		case strings.HasPrefix(strings.ToUpper(line), "RCPT TO:"):
			m.to = line[len("RCPT TO:"):]
			say("250 ok")
		case cmd == "DATA":
			say("354 go ahead")
			b, err := r.ReadDotBytes()
			if err != nil {
				return
			}
			m.data = string(b)
			f.mu.Lock()
			f.msgs = append(f.msgs, m)
			f.mu.Unlock()
			say("250 queued")
		case cmd == "QUIT":
			say("221 bye")
			return
		default:
			say("502 not implemented")
		}
	}
}

func (f *fakeSMTP) messages() []smtpMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]smtpMessage(nil), f.msgs...)
}
