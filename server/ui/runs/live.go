package runs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/server/ui"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui/live"
)

// Live updates (server/ui/live streams them): a page that updates itself carries
// data-live-src, the URL of its stream, whose events carry the page's live blocks as this
// package renders them.

// liveChartsGap is the least time between two renderings of a run's charts in one stream:
// they cost the most to draw and change little from one second to the next.
const liveChartsGap = 15 * time.Second

// liveRead runs a live render's database work under the token pool.
func (s *Server) liveRead(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.deps.Tokens.Do(ctx, fn)
}

// liveBlocks renders the named blocks (element id, template block) of a page template.
func (s *Server) liveBlocks(pageName string, data any, blocks ...[2]string) ([]live.Block, error) {
	out := make([]live.Block, 0, len(blocks))
	for _, b := range blocks {
		var buf bytes.Buffer
		if err := s.ui.ExecuteBlock(&buf, pageName, b[1], data); err != nil {
			return nil, fmt.Errorf("render %s/%s: %w", pageName, b[1], err)
		}
		out = append(out, live.Block{ID: b[0], HTML: strings.TrimSpace(buf.String())})
	}
	return out, nil
}

// liveChanged returns the channel closed at the next change of any run, or nil (never ready)
// where there is no run cache to ask.
func (s *Server) liveChanged() <-chan struct{} {
	changed := s.ui.Role().Changed
	if changed == nil {
		return nil
	}
	return changed()
}

// liveStream serves render's blocks as an event stream (live.Streams.Serve) to the session's
// user, whom it reads again now and then (liveSessionValid); a first render that fails is
// answered as a page's error.
func (s *Server) liveStream(c *gin.Context, render live.Render) {
	// The session was checked by LoadUser a moment ago; the stream checks it again now and then.
	name, stamp, sid := ui.SessionIdentity(c)
	var recheck live.Recheck
	if name != "" {
		recheck = func(ctx context.Context) (*rundb.User, bool, error) { return s.liveSessionValid(ctx, name, stamp, sid) }
	}
	if err := s.live.Serve(c, ui.CurrentUser(c), recheck, render); err != nil {
		s.ui.Error(c, err)
	}
}

// liveSessionValid reads the user of a stream's session again, as LoadUser does for a
// request: ok is false when the user is gone, blocked or pending, or when the session's stamp
// is no longer theirs (a new password).
func (s *Server) liveSessionValid(ctx context.Context, name, stamp, sid string) (u *rundb.User, ok bool, err error) {
	err = s.liveRead(ctx, func(ctx context.Context) error {
		var err error
		u, err = s.deps.Users.Get(ctx, name)
		return err
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if !ui.SessionHolds(u, stamp, sid, time.Now()) {
		return nil, false, nil
	}
	return u, true, nil
}

// HomeEvents is GET /tests/events: the live stream of the homepage (the numbers and the
// pending and active runs) or, with ?user=, of a user's page (their pending and active runs).
// The rows are sent unfiltered; live.js applies the page's filters again.
func (s *Server) HomeEvents(c *gin.Context) {
	db, err := s.runsDB()
	if err != nil {
		s.ui.Error(c, err)
		return
	}
	username := c.Query("user")
	blocks := [][2]string{{"pending-runs", "runs-pending-section"}, {"active-runs", "runs-active-section"}}
	if username == "" {
		blocks = append([][2]string{{"home-stats", "runs-home-stats"}}, blocks...)
	}
	s.liveStream(c, func(ctx context.Context, _ *rundb.User) ([]live.Block, bool, error) {
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

// RunEvents is GET /tests/view/:id/events: the live stream of a run's page, or with
// ?for=live_elo or ?for=stats of its live Elo or statistics page. It ends after the final
// state of a finished run.
func (s *Server) RunEvents(c *gin.Context) {
	id := c.Param("id")
	q := c.Request.URL.Query()
	kind := q.Get("for")
	switch kind {
	case "", "live_elo", "stats":
	default:
		s.ui.PageError(c, http.StatusNotFound, "There is no such stream: for= takes live_elo or stats.")
		return
	}
	primary := s.ui.Scheduler() != nil
	csrf := ui.SessionCSRF(c)
	var charts viewCharts
	var chartsAt time.Time
	s.liveStream(c, func(ctx context.Context, user *rundb.User) ([]live.Block, bool, error) {
		var r *rundb.Run
		err := s.liveRead(ctx, func(ctx context.Context) error {
			var err error
			r, err = s.viewRun(ctx, id)
			return err
		})
		if err != nil {
			return nil, false, err
		}
		var out []live.Block
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
			d := viewDataOf(r, q, user, primary, csrf, false, s.hasPatch(r))
			if r.Finished || time.Since(chartsAt) >= liveChartsGap {
				charts, chartsAt = viewChartsOf(r), time.Now()
			}
			d.Charts = charts
			d.Page = ui.Page{Title: d.RunTitle, Version: s.deps.Version, Path: "/tests/view/" + d.ID,
				User: user, CSRF: csrf, Primary: primary}
			out, err = s.liveBlocks("view", d,
				[2]string{"run-status", "view-status"}, [2]string{"run-results", "view-results"},
				[2]string{"run-actions", "view-actions"}, [2]string{"run-charts", "view-charts"},
				[2]string{"tasks", "view-tasks"})
		}
		return out, r.Finished, err
	})
}
