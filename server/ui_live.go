package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-contrib/sessions"
	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

// Live updates: Server-Sent Events streams of server-rendered HTML. A page that updates
// itself carries data-live-src, the URL of its stream; static/live.js opens it and, for each
// "update" event, replaces the elements of the page that have the ids of the event's
// top-level elements. An "end" event says the stream is over for good (the run finished), so
// that the browser does not reconnect. Without JavaScript the pages are complete as served.
//
// A stream renders its page's live blocks when a run changes (Deps.Changed) or, on a
// secondary, every livePoll; at most once per liveMinGap, sending only the blocks that changed
// since the last event (a run's charts are redrawn at most every liveChartsGap). While nothing changes it sends a comment every liveHeartbeat so that
// proxies keep the connection open. It ends when the client leaves, when the server shuts
// down, after the final state of a finished run, when its session is no longer valid (checked
// again every liveRecheck), or after liveLifetime, when the browser opens a new one.
//
// Streams need no login, so they are bounded: at most liveMaxStreams open at once, at most
// liveMaxPerIP from one client address (an IPv6 /64); beyond that a stream is refused with 503.

const (
	liveMinGap    = time.Second
	liveHeartbeat = 20 * time.Second
	livePoll      = 5 * time.Second
	// liveTick is how often a waiting stream looks at the clock and at shutdown.
	liveTick = time.Second
	// liveWriteWait is how long one write to a stream may take: a browser that reads nothing
	// for that long has gone, and its connection is closed.
	liveWriteWait = 30 * time.Second
	// liveChartsGap is the least time between two renderings of a run's charts in one
	// stream: they cost the most to draw and change little from one second to the next.
	liveChartsGap = 15 * time.Second

	// liveMaxStreams is how many streams the server keeps open at once, liveMaxPerIP how many
	// of them one client address may hold (a person with a few tabs open needs a few).
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

// liveLimits counts the open streams, in total and by client address. Its settings are fixed
// once the server serves (tests lower them before). Safe for concurrent use.
type liveLimits struct {
	maxStreams, maxPerIP int
	lifetime, reconnect  time.Duration
	busyRetry, recheck   time.Duration

	mu    sync.Mutex
	total int
	perIP map[string]int // only addresses with streams open
}

// newLiveLimits returns the limits with the default settings and no stream open.
func newLiveLimits() *liveLimits {
	return &liveLimits{maxStreams: liveMaxStreams, maxPerIP: liveMaxPerIP,
		lifetime: liveLifetime, reconnect: liveReconnect, busyRetry: liveBusyRetry, recheck: liveRecheck,
		perIP: map[string]int{}}
}

// acquire takes a slot for a stream from ip; ok is false when there is none. release, to be
// called once when the stream ends, gives the slot back.
func (l *liveLimits) acquire(ip string) (release func(), ok bool) {
	key := guard.ClientKeyOf(ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.maxStreams || l.perIP[key] >= l.maxPerIP {
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

// open returns how many streams are open and from how many client addresses.
func (l *liveLimits) open() (streams, clients int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, len(l.perIP)
}

// liveBlock is one element of a page, by id, as HTML.
type liveBlock struct {
	ID   string
	HTML string
}

// liveRender renders a page's live blocks for user (nil: nobody logged in), who is read again
// now and then while the stream lasts; done means the stream should end after sending them.
// It takes a token of the pool for its database work only (liveRead), not for the rendering.
type liveRender func(ctx context.Context, user *rundb.User) (blocks []liveBlock, done bool, err error)

// liveRead runs a live render's database work under the token pool.
func (s *Server) liveRead(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.deps.Tokens.Do(ctx, fn)
}

// liveBlocks renders the named blocks (element id, template block) of a page template.
func (s *Server) liveBlocks(pageName string, data any, blocks ...[2]string) ([]liveBlock, error) {
	t, ok := s.pages[pageName]
	if !ok {
		return nil, fmt.Errorf("no page template %s", pageName)
	}
	out := make([]liveBlock, 0, len(blocks))
	for _, b := range blocks {
		var buf bytes.Buffer
		if err := t.ExecuteTemplate(&buf, b[1], data); err != nil {
			return nil, fmt.Errorf("render %s/%s: %w", pageName, b[1], err)
		}
		out = append(out, liveBlock{ID: b[0], HTML: strings.TrimSpace(buf.String())})
	}
	return out, nil
}

// liveChanged returns the channel closed at the next change of any run, or nil (never ready)
// where there is no run cache to ask.
func (s *Server) liveChanged() <-chan struct{} {
	if s.role().changed == nil {
		return nil
	}
	return s.role().changed()
}

// liveWriteEvent writes one event; data may span lines, each of which becomes a data line.
func liveWriteEvent(w io.Writer, event, data string) error {
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

// liveStream serves an event stream of render's blocks. The first render happens before
// anything is sent, so a missing run is a plain 404. A stream needs a slot (liveLimits): when
// the server or the client's address has too many open, it is refused with 503.
func (s *Server) liveStream(c *gin.Context, render liveRender) {
	lim := s.live
	release, ok := lim.acquire(c.ClientIP())
	if !ok {
		c.Header("Retry-After", strconv.Itoa(max(1, int(lim.busyRetry/time.Second))))
		guard.ExpectRefusal(c) // any client can cause it: not an error of the server's
		c.String(http.StatusServiceUnavailable, "Too many live update streams are open; try again later.\n")
		return
	}
	defer release()

	ctx := c.Request.Context()
	opened := time.Now()
	// A little less than the lifetime, at random, so that streams opened together do not all
	// reconnect together.
	lifetime := lim.lifetime
	if lifetime > 10 {
		lifetime -= rand.N(lifetime / 10)
	}
	// The session was checked by loadUser a moment ago; it is checked again every
	// lim.recheck, before a render.
	sess := sessions.Default(c)
	name, _ := sess.Get(sessionUser).(string)
	stamp, _ := sess.Get(sessionStamp).(string)
	sid, _ := sess.Get(sessionID).(string)
	user, checked := currentUser(c), opened

	do := func() ([]liveBlock, bool, error) { return render(ctx, user) }
	changed := s.liveChanged() // taken before rendering, so no change is missed
	blocks, done, err := do()
	if err != nil {
		s.uiError(c, err)
		return
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
	if _, err := fmt.Fprintf(c.Writer, "retry: %d\n\n", lim.reconnect.Milliseconds()); err != nil {
		return
	}
	sent := map[string]string{}
	lastWrite, lastRender := time.Now(), time.Now()
	write := func(event, data string) bool {
		extend()
		if err := liveWriteEvent(c.Writer, event, data); err != nil {
			return false
		}
		c.Writer.Flush()
		lastWrite = time.Now()
		return true
	}
	send := func(blocks []liveBlock) bool {
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
		return
	}
	// expired: the stream has lived its time; it ends without an end event, so the browser
	// opens a new one (which goes through loadUser and the limits again).
	expired := func(now time.Time) bool { return now.Sub(opened) >= lifetime }
	ticker := time.NewTicker(liveTick)
	defer ticker.Stop()
	for !done {
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				break wait
			case now := <-ticker.C:
				if s.shuttingDown.Load() || expired(now) {
					return
				}
				if changed == nil && now.Sub(lastRender) >= livePoll {
					break wait
				}
				if now.Sub(lastWrite) >= liveHeartbeat {
					extend()
					if _, err := io.WriteString(c.Writer, ": still here\n\n"); err != nil {
						return
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
				return
			case <-t.C:
			}
		}
		if expired(time.Now()) {
			return
		}
		if name != "" && time.Since(checked) >= lim.recheck {
			u, ok, err := s.liveSessionValid(ctx, name, stamp, sid)
			checked = time.Now()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				s.logger.Error("live update: session check", "path", c.Request.URL.Path, "err", err)
				return // the browser reconnects after a while
			case !ok:
				// Logged out for good (blocked, removed, password changed): the page must be
				// reloaded, which loadUser answers.
				write("end", "signed out")
				return
			}
			user = u // its rights may have changed (an approver no longer one)
		}
		changed = s.liveChanged()
		lastRender = time.Now()
		blocks, done, err = do()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rundb.ErrNotFound):
			// The run is gone (deleted and evicted): nothing more will come.
			write("end", "gone")
			return
		case err != nil:
			s.logger.Error("live update", "path", c.Request.URL.Path, "err", err)
			return // the browser reconnects after a while
		}
		if !send(blocks) {
			return
		}
	}
	write("end", "finished")
}

// liveSessionValid reads the user of a stream's session again, as loadUser does for a
// request: ok is false when the user is gone, blocked or pending, or when the session's stamp
// is no longer theirs (a new password).
func (s *Server) liveSessionValid(ctx context.Context, name, stamp, sid string) (u *rundb.User, ok bool, err error) {
	err = s.liveRead(ctx, func(ctx context.Context) error {
		var err error
		u, err = s.deps.DB.Users.Get(ctx, name)
		return err
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if !sessionHolds(u, stamp, sid, time.Now()) {
		return nil, false, nil
	}
	return u, true, nil
}

// liveCSRF is the session's CSRF token for forms in live blocks, read without creating one:
// the page that opened the stream has made it already.
func liveCSRF(c *gin.Context) string {
	tok, _ := sessions.Default(c).Get(sessionCSRF).(string)
	return tok
}

// homeEvents is GET /tests/events: the live stream of the homepage (the numbers and the
// pending and active runs) or, with ?user=, of a user's page (their pending and active runs).
// The rows are sent unfiltered; live.js applies the page's filters again.
func (s *Server) homeEvents(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.uiError(c, err)
		return
	}
	username := c.Query("user")
	blocks := [][2]string{{"pending-runs", "runs-pending-section"}, {"active-runs", "runs-active-section"}}
	if username == "" {
		blocks = append([][2]string{{"home-stats", "runs-home-stats"}}, blocks...)
	}
	s.liveStream(c, func(ctx context.Context, _ *rundb.User) ([]liveBlock, bool, error) {
		var unfinished []*rundb.Run
		err := s.liveRead(ctx, func(ctx context.Context) error {
			var err error
			unfinished, err = s.homeUnfinished(ctx, db, username)
			return err
		})
		if err != nil {
			return nil, false, err
		}
		var d testsPageData
		d.fillUnfinished(unfinished, url.Values{})
		out, err := s.liveBlocks("tests", d, blocks...)
		return out, false, err
	})
}

// runEvents is GET /tests/view/:id/events: the live stream of a run's page, or with
// ?for=live_elo or ?for=stats of its live Elo or statistics page. It ends after the final
// state of a finished run.
func (s *Server) runEvents(c *gin.Context) {
	id := c.Param("id")
	q := c.Request.URL.Query()
	kind := q.Get("for")
	switch kind {
	case "", "live_elo", "stats":
	default:
		s.pageError(c, http.StatusNotFound, "There is no such stream: for= takes live_elo or stats.")
		return
	}
	primary := s.scheduler() != nil
	csrf := liveCSRF(c)
	var charts viewCharts
	var chartsAt time.Time
	s.liveStream(c, func(ctx context.Context, user *rundb.User) ([]liveBlock, bool, error) {
		var r *rundb.Run
		err := s.liveRead(ctx, func(ctx context.Context) error {
			var err error
			r, err = s.viewRun(ctx, id)
			return err
		})
		if err != nil {
			return nil, false, err
		}
		var out []liveBlock
		switch kind {
		case "live_elo":
			if r.Args.SPRT == nil {
				return nil, false, fmt.Errorf("run %s is not an SPRT: %w", id, rundb.ErrNotFound)
			}
			out, err = s.liveBlocks("live_elo", viewLiveElo(r),
				[2]string{"live-elo-gauges", "live-elo-gauges"}, [2]string{"live-elo-details", "live-elo-details"})
		case "stats":
			out, err = s.liveBlocks("run_stats", viewRunStats(r), [2]string{"stats-content", "stats-content"})
		default:
			d := viewDataOf(r, q, user, primary, csrf, false)
			if r.Finished || time.Since(chartsAt) >= liveChartsGap {
				charts, chartsAt = viewChartsOf(r), time.Now()
			}
			d.Charts = charts
			d.page = page{Title: d.RunTitle, Version: s.deps.Version, Path: "/tests/view/" + d.ID,
				User: user, CSRF: csrf, Primary: primary}
			out, err = s.liveBlocks("view", d,
				[2]string{"run-status", "view-status"}, [2]string{"run-results", "view-results"},
				[2]string{"run-actions", "view-actions"}, [2]string{"run-charts", "view-charts"},
				[2]string{"tasks", "view-tasks"})
		}
		return out, r.Finished, err
	})
}
