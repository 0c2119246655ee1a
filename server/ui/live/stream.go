// Package live serves the web UI's live updates: Server-Sent Events streams of server-rendered
// HTML. A page that updates itself carries data-live-src, the URL of its stream;
// static/live.js opens it and, for each "update" event, replaces the elements of the page that
// have the ids of the event's top-level elements. An "end" event says the stream is over for
// good (the run finished), so that the browser does not reconnect. Without JavaScript the pages
// are complete as served.
//
// A stream renders its page's live blocks when a run changes (Streams.Changed) or, on a
// secondary, every Poll; at most once per liveMinGap, sending only the blocks that changed
// since the last event (the web UI redraws a run's charts less often). While nothing changes it
// sends a comment every liveHeartbeat so that proxies keep the connection open. It ends when the
// client leaves, when the server shuts down, after the final state of a finished run, when its
// session is no longer valid (checked again every Limits.Recheck), or after Limits.Lifetime,
// when the browser opens a new one.
//
// Streams need no login, so they are bounded: at most Limits.MaxStreams open at once, at most
// Limits.MaxPerIP from one client address (an IPv6 /64); beyond that a stream is refused with
// 503.
//
// The web UI (server/ui) renders the blocks; this package only knows how to stream them.
package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

const (
	liveMinGap    = time.Second
	liveHeartbeat = 20 * time.Second
	// Poll is how often a stream renders again where no run cache tells it of changes (a
	// secondary).
	Poll = 5 * time.Second
	// liveTick is how often a waiting stream looks at the clock and at shutdown.
	liveTick = time.Second
	// liveWriteWait is how long one write to a stream may take: a browser that reads nothing
	// for that long has gone, and its connection is closed.
	liveWriteWait = 30 * time.Second

	// liveMaxStreams is how many streams the server keeps open at once, liveMaxPerIP how many
	// of them one client address may hold (a person with a few tabs open needs a few): the
	// default Limits.
	liveMaxStreams = 2000
	liveMaxPerIP   = 16
	// liveLifetime is how long a stream lasts before it ends and the browser opens a new
	// one, after liveReconnect (sent as the stream's retry field).
	liveLifetime  = 30 * time.Minute
	liveReconnect = 5 * time.Second
	// liveBusyRetry is the Retry-After of a refused stream.
	liveBusyRetry = 30 * time.Second
	// liveRecheck is how often a logged-in stream reads its user again (before a render).
	liveRecheck = 10 * time.Second
)

// Limits count the open streams, in total and by client address. Their settings are fixed
// once the server serves (tests lower them before). Safe for concurrent use.
type Limits struct {
	// MaxStreams is how many streams may be open at once, MaxPerIP how many of them one
	// client address may hold.
	MaxStreams, MaxPerIP int
	// Lifetime is how long a stream lasts before it ends and the browser opens a new one,
	// after Reconnect (sent as the stream's retry field).
	Lifetime, Reconnect time.Duration
	// BusyRetry is the Retry-After of a refused stream; Recheck how often a logged-in stream
	// reads its user again (before a render).
	BusyRetry, Recheck time.Duration

	mu    sync.Mutex
	total int
	perIP map[string]int // only addresses with streams open
}

// NewLimits returns the limits with the default settings and no stream open.
func NewLimits() *Limits {
	return &Limits{MaxStreams: liveMaxStreams, MaxPerIP: liveMaxPerIP,
		Lifetime: liveLifetime, Reconnect: liveReconnect, BusyRetry: liveBusyRetry, Recheck: liveRecheck,
		perIP: map[string]int{}}
}

// acquire takes a slot for a stream from ip; ok is false when there is none. release, to be
// called once when the stream ends, gives the slot back.
func (l *Limits) acquire(ip string) (release func(), ok bool) {
	key := guard.ClientKeyOf(ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.MaxStreams || l.perIP[key] >= l.MaxPerIP {
		return nil, false
	}
	l.total++
	l.perIP[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perIP[key]--; l.perIP[key] <= 0 {
				delete(l.perIP, key)
			}
		})
	}, true
}

// Open returns how many streams are open and from how many client addresses.
func (l *Limits) Open() (streams, clients int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, len(l.perIP)
}

// Block is one element of a page, by id, as HTML.
type Block struct {
	ID   string
	HTML string
}

// Render renders a page's live blocks for user (nil: nobody logged in), who is read again
// now and then while the stream lasts; done means the stream should end after sending them.
// It takes a token of the pool for its database work only, not for the rendering.
type Render func(ctx context.Context, user *rundb.User) (blocks []Block, done bool, err error)

// Recheck reads a stream's user again, as a request's session check does: ok is false when
// the session no longer holds (the user is gone, blocked or pending, or has a new password).
type Recheck func(ctx context.Context) (u *rundb.User, ok bool, err error)

// Streams serve one server's live updates. Safe for concurrent use.
type Streams struct {
	Limits *Limits
	Logger *slog.Logger
	// Changed (required) returns the channel closed at the next change of any run, or a nil
	// channel (never ready) where there is no run cache to ask: streams then poll.
	Changed func() <-chan struct{}
	// ShuttingDown reports whether the server has begun to shut down: streams then end.
	ShuttingDown func() bool
}

// writeEvent writes one event; data may span lines, each of which becomes a data line.
func writeEvent(w io.Writer, event, data string) error {
	data = strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	for line := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Serve serves an event stream of render's blocks to user (nil: nobody logged in), whose
// session recheck reads again (nil when nobody is logged in). The first render happens before
// anything is sent: its error is returned for the caller to answer (a missing run is a plain
// 404), and once it succeeds Serve answers everything itself and returns nil. A stream needs a
// slot (Limits): when the server or the client's address has too many open, it is refused with
// 503.
func (s *Streams) Serve(c *gin.Context, user *rundb.User, recheck Recheck, render Render) error {
	lim := s.Limits
	release, ok := lim.acquire(c.ClientIP())
	if !ok {
		c.Header("Retry-After", strconv.Itoa(max(1, int(lim.BusyRetry/time.Second))))
		guard.ExpectRefusal(c) // any client can cause it: not an error of the server's
		c.String(http.StatusServiceUnavailable, "Too many live update streams are open; try again later.\n")
		return nil
	}
	defer release()

	ctx := c.Request.Context()
	changed := s.Changed() // taken before rendering, so no change is missed
	blocks, done, err := render(ctx, user)
	if err != nil {
		return err
	}
	st := s.open(c)
	if !st.send(blocks) {
		return nil
	}
	ticker := time.NewTicker(liveTick)
	defer ticker.Stop()
	for !done {
		if !s.wait(ctx, st, changed, ticker.C) {
			return nil
		}
		if recheck != nil && time.Since(st.checked) >= lim.Recheck {
			if user, ok = s.recheck(ctx, st, recheck); !ok {
				return nil
			}
		}
		changed = s.Changed()
		st.lastRender = time.Now()
		blocks, done, err = render(ctx, user)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, rundb.ErrNotFound):
			// The run is gone (deleted and evicted): nothing more will come.
			st.write("end", "gone")
			return nil
		case err != nil:
			s.Logger.Error("live update", "path", c.Request.URL.Path, "err", err)
			return nil // the browser reconnects after a while
		}
		if !st.send(blocks) {
			return nil
		}
	}
	st.write("end", "finished")
	return nil
}

// stream is one open event stream: what it sent, and when.
type stream struct {
	c  *gin.Context
	rc *http.ResponseController
	// sent is each block's HTML as last sent, by ID: a block is sent again only when it changed.
	sent   map[string]string
	opened time.Time
	// lifetime is a little less than Limits.Lifetime, at random, so that streams opened
	// together do not all reconnect together.
	lifetime time.Duration
	// checked is when the session was last checked: by the web UI just before the stream
	// opened, then every Limits.Recheck, before a render.
	checked               time.Time
	lastWrite, lastRender time.Time
	ok                    bool // false once a write failed
}

// open answers c with the stream's headers and its retry field, and returns the stream.
func (s *Streams) open(c *gin.Context) *stream {
	lim := s.Limits
	now := time.Now()
	lifetime := lim.Lifetime
	if lifetime > 10 {
		lifetime -= rand.N(lifetime / 10)
	}
	st := &stream{c: c, rc: http.NewResponseController(c.Writer), sent: map[string]string{},
		opened: now, lifetime: lifetime, checked: now, lastWrite: now, lastRender: now, ok: true}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, private")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	c.Status(http.StatusOK)
	c.Writer.WriteHeaderNow()
	st.extend()
	// How long the browser waits before it reconnects, after the stream's lifetime or a
	// dropped connection.
	if _, err := fmt.Fprintf(c.Writer, "retry: %d\n\n", lim.Reconnect.Milliseconds()); err != nil {
		st.ok = false
	}
	return st
}

// extend gives the next write liveWriteWait: the server-wide write timeout would cut the
// stream, and a browser that stops reading is let go.
func (st *stream) extend() { _ = st.rc.SetWriteDeadline(time.Now().Add(liveWriteWait)) }

// write sends one event; false when the browser is gone.
func (st *stream) write(event, data string) bool {
	if !st.ok {
		return false
	}
	st.extend()
	if err := writeEvent(st.c.Writer, event, data); err != nil {
		st.ok = false
		return false
	}
	st.c.Writer.Flush()
	st.lastWrite = time.Now()
	return true
}

// send sends the blocks that changed since they were last sent, in one update event.
func (st *stream) send(blocks []Block) bool {
	if !st.ok {
		return false
	}
	var parts []string
	for _, b := range blocks {
		if st.sent[b.ID] != b.HTML {
			st.sent[b.ID] = b.HTML
			parts = append(parts, b.HTML)
		}
	}
	if len(parts) == 0 {
		st.c.Writer.Flush() // the retry field, at least, goes out now
		return true
	}
	return st.write("update", strings.Join(parts, "\n"))
}

// heartbeat writes a comment when nothing was written for liveHeartbeat, so that proxies keep
// the connection; false when the browser is gone.
func (st *stream) heartbeat(now time.Time) bool {
	if now.Sub(st.lastWrite) < liveHeartbeat {
		return true
	}
	st.extend()
	if _, err := io.WriteString(st.c.Writer, ": still here\n\n"); err != nil {
		return false
	}
	st.c.Writer.Flush()
	st.lastWrite = now
	return true
}

// expired reports whether the stream has lived its time; it then ends without an end event, so
// the browser opens a new one (which goes through the session check and the limits again).
func (st *stream) expired(now time.Time) bool { return now.Sub(st.opened) >= st.lifetime }

// wait waits until a render is due: a change (or, without change signals, Poll since the last
// render), and at least liveMinGap since the last one. False: the stream ends (the browser left,
// the server is shutting down, the stream expired).
func (s *Streams) wait(ctx context.Context, st *stream, changed <-chan struct{}, tick <-chan time.Time) bool {
wait:
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			break wait
		case now := <-tick:
			if s.ShuttingDown() || st.expired(now) {
				return false
			}
			if changed == nil && now.Sub(st.lastRender) >= Poll {
				break wait
			}
			if !st.heartbeat(now) {
				return false
			}
		}
	}
	if gap := liveMinGap - time.Since(st.lastRender); gap > 0 {
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return !st.expired(time.Now())
}

// recheck checks the session again; false ends the stream: the browser left, the check failed
// (the browser reconnects after a while), or the user is logged out for good (blocked, removed,
// password changed) and the page must be reloaded, which the web UI's session check answers.
// The user it returns may have other rights than before (an approver no longer one).
func (s *Streams) recheck(ctx context.Context, st *stream, recheck Recheck) (*rundb.User, bool) {
	u, ok, err := recheck(ctx)
	st.checked = time.Now()
	switch {
	case ctx.Err() != nil:
		return nil, false
	case err != nil:
		s.Logger.Error("live update: session check", "path", st.c.Request.URL.Path, "err", err)
		return nil, false
	case !ok:
		st.write("end", "signed out")
		return nil, false
	}
	return u, true
}
