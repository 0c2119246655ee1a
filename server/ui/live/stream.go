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
	opened := time.Now()
	// A little less than the lifetime, at random, so that streams opened together do not all
	// reconnect together.
	lifetime := lim.Lifetime
	if lifetime > 10 {
		lifetime -= rand.N(lifetime / 10)
	}
	// The session was checked by the web UI a moment ago; it is checked again every
	// lim.Recheck, before a render.
	checked := opened

	do := func() ([]Block, bool, error) { return render(ctx, user) }
	changed := s.Changed() // taken before rendering, so no change is missed
	blocks, done, err := do()
	if err != nil {
		return err
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, private")
	h.Set("X-Accel-Buffering", "no") // nginx: pass each event on at once
	c.Status(http.StatusOK)
	c.Writer.WriteHeaderNow()
	// The server-wide write timeout would cut the stream; each write gets liveWriteWait of its
	// own instead, so a browser that stops reading is let go.
	rc := http.NewResponseController(c.Writer)
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(liveWriteWait)) }
	extend()

	// How long the browser waits before it reconnects, after the stream's lifetime or a
	// dropped connection.
	if _, err := fmt.Fprintf(c.Writer, "retry: %d\n\n", lim.Reconnect.Milliseconds()); err != nil {
		return nil
	}
	sent := map[string]string{}
	lastWrite, lastRender := time.Now(), time.Now()
	write := func(event, data string) bool {
		extend()
		if err := writeEvent(c.Writer, event, data); err != nil {
			return false
		}
		c.Writer.Flush()
		lastWrite = time.Now()
		return true
	}
	send := func(blocks []Block) bool {
		var parts []string
		for _, b := range blocks {
			if sent[b.ID] != b.HTML {
				sent[b.ID] = b.HTML
				parts = append(parts, b.HTML)
			}
		}
		if len(parts) == 0 {
			c.Writer.Flush() // the retry field, at least, goes out now
			return true
		}
		return write("update", strings.Join(parts, "\n"))
	}
	if !send(blocks) {
		return nil
	}
	// expired: the stream has lived its time; it ends without an end event, so the browser
	// opens a new one (which goes through the session check and the limits again).
	expired := func(now time.Time) bool { return now.Sub(opened) >= lifetime }
	ticker := time.NewTicker(liveTick)
	defer ticker.Stop()
	for !done {
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				break wait
			case now := <-ticker.C:
				if s.ShuttingDown() || expired(now) {
					return nil
				}
				if changed == nil && now.Sub(lastRender) >= Poll {
					break wait
				}
				if now.Sub(lastWrite) >= liveHeartbeat {
					extend()
					if _, err := io.WriteString(c.Writer, ": still here\n\n"); err != nil {
						return nil
					}
					c.Writer.Flush()
					lastWrite = now
				}
			}
		}
		if gap := liveMinGap - time.Since(lastRender); gap > 0 {
			t := time.NewTimer(gap)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		if expired(time.Now()) {
			return nil
		}
		if recheck != nil && time.Since(checked) >= lim.Recheck {
			u, ok, err := recheck(ctx)
			checked = time.Now()
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				s.Logger.Error("live update: session check", "path", c.Request.URL.Path, "err", err)
				return nil // the browser reconnects after a while
			case !ok:
				// Logged out for good (blocked, removed, password changed): the page must be
				// reloaded, which the web UI's session check answers.
				write("end", "signed out")
				return nil
			}
			user = u // its rights may have changed (an approver no longer one)
		}
		changed = s.Changed()
		lastRender = time.Now()
		blocks, done, err = do()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, rundb.ErrNotFound):
			// The run is gone (deleted and evicted): nothing more will come.
			write("end", "gone")
			return nil
		case err != nil:
			s.Logger.Error("live update", "path", c.Request.URL.Path, "err", err)
			return nil // the browser reconnects after a while
		}
		if !send(blocks) {
			return nil
		}
	}
	write("end", "finished")
	return nil
}
