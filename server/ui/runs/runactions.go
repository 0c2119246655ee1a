package runs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
)

// Actions on a run: stop, approve, purge, delete and modify, each a form on the run's page.

// runActionTarget starts every action on a run: a logged-in user, the primary, and the run
// named by the form's run-id. On failure the answer is sent (login page, 503, 400 or 404).
func (s *Server) runActionTarget(c *gin.Context) (*rundb.User, *rundb.Run, bool) {
	u, ok := s.ui.RequireUser(c)
	if !ok {
		return nil, nil, false
	}
	if !s.ui.RequirePrimary(c) {
		return nil, nil, false
	}
	raw := strings.TrimSpace(c.PostForm("run-id"))
	if raw == "" {
		s.ui.PageError(c, http.StatusBadRequest, "Which run? The form did not say (run-id is missing).")
		return nil, nil, false
	}
	r, ok := s.formRun(c, raw)
	return u, r, ok
}

// formRun reads the run a form or link names by id: a malformed id is a 400 page, a missing
// run a 404; false once the page is sent.
func (s *Server) formRun(c *gin.Context, raw string) (*rundb.Run, bool) {
	id, err := rundb.ParseObjectID(raw)
	if err != nil {
		s.ui.PageError(c, http.StatusBadRequest, "That is not a run id: a run id is 24 hexadecimal digits.")
		return nil, false
	}
	var r *rundb.Run
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var err error
		r, err = s.ui.Runs().Snapshot(ctx, id)
		return err
	})
	return r, ok
}

// ownerOrApprover answers 403 unless u owns r or is an approver.
func (s *Server) ownerOrApprover(c *gin.Context, u *rundb.User, r *rundb.Run, what string) bool {
	if u.Username == r.Args.Username || u.IsApprover() {
		return true
	}
	s.ui.PageError(c, http.StatusForbidden, "Only the run's owner or an approver may "+what+" this run.")
	return false
}

func runPageURL(r *rundb.Run) string { return "/tests/view/" + r.ID.Hex() }

// StopRunSubmit finishes a run, for its owner or an approver.
func (s *Server) StopRunSubmit(c *gin.Context) {
	u, r, ok := s.runActionTarget(c)
	if !ok || !s.ownerOrApprover(c, u, r, "stop") {
		return
	}
	if !s.ui.Do(c, func(ctx context.Context) error {
		return s.ui.Scheduler().StopRunByUser(ctx, r.ID, u.Username)
	}) {
		return
	}
	s.ui.Flash(c, "success", "Run stopped.")
	s.ui.Redirect(c, runPageURL(r))
}

// ApproveRunSubmit approves someone else's run, once, for approvers.
func (s *Server) ApproveRunSubmit(c *gin.Context) {
	u, r, ok := s.runActionTarget(c)
	if !ok {
		return
	}
	if !u.IsApprover() {
		s.ui.PageError(c, http.StatusForbidden, "Only approvers may approve runs.")
		return
	}
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		return s.ui.Scheduler().ApproveRun(ctx, r.ID, u.Username)
	})
	switch {
	case errors.Is(err, scheduler.ErrSelfApproval):
		s.ui.PageError(c, http.StatusForbidden, "You cannot approve your own run: another approver must.")
		return
	case errors.Is(err, scheduler.ErrAlreadyApproved):
		s.ui.Flash(c, "info", "This run was already approved.")
	case err != nil:
		s.ui.Error(c, err)
		return
	default:
		s.ui.Flash(c, "success", "Run approved.")
	}
	s.ui.Redirect(c, runPageURL(r))
}

// PurgeRunSubmit removes the games of bad workers from a finished run, for its owner or an
// approver.
func (s *Server) PurgeRunSubmit(c *gin.Context) {
	u, r, ok := s.runActionTarget(c)
	if !ok || !s.ownerOrApprover(c, u, r, "purge") {
		return
	}
	var msg string
	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		msg, err = s.ui.Scheduler().PurgeRunByUser(ctx, r.ID, u.Username)
		return err
	}) {
		return
	}
	if msg != "" {
		s.ui.Flash(c, "info", "Nothing purged: "+msg+".")
	} else {
		s.ui.Flash(c, "success", "Run purged.")
	}
	s.ui.Redirect(c, runPageURL(r))
}

// DeleteRunSubmit finishes a run and hides it from the lists, for its owner or an approver.
func (s *Server) DeleteRunSubmit(c *gin.Context) {
	u, r, ok := s.runActionTarget(c)
	if !ok || !s.ownerOrApprover(c, u, r, "delete") {
		return
	}
	if !s.ui.Do(c, func(ctx context.Context) error {
		return s.ui.Scheduler().DeleteRun(ctx, r.ID, u.Username)
	}) {
		return
	}
	s.ui.Flash(c, "success", "Run deleted.")
	s.ui.Redirect(c, runPageURL(r))
}

// modifyFields name the modify form's fields for people, by the scheduler's names.
var modifyFields = map[string]string{"num_games": "Number of games", "throughput": "Throughput", "priority": "Priority"}

// ModifyRunSubmit changes a run's game budget, priority, throughput, auto-purge and (for its
// owner) description, for its owner or an approver. A refused change changes nothing and says
// why on the run's page.
func (s *Server) ModifyRunSubmit(c *gin.Context) {
	u, r, ok := s.runActionTarget(c)
	if !ok || !s.ownerOrApprover(c, u, r, "modify") {
		return
	}
	refuse := func(msg string) {
		s.ui.Flash(c, "error", "Not modified: "+msg)
		s.ui.Redirect(c, runPageURL(r))
	}
	m := scheduler.RunModification{AutoPurge: c.PostForm("auto-purge") != ""}
	for _, f := range []struct {
		name, label string
		dst         *int
	}{
		{"num-games", "Number of games", &m.NumGames},
		{"priority", "Priority", &m.Priority},
		{"throughput", "Throughput", &m.Throughput},
	} {
		v := strings.TrimSpace(c.PostForm(f.name))
		if v == "" {
			refuse(f.label + ": missing: give a whole number.")
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			refuse(fmt.Sprintf("%s: %q is not a whole number.", f.label, v))
			return
		}
		*f.dst = n
	}
	if info, ok := c.GetPostForm("info"); ok && u.Username == r.Args.Username {
		m.Info = &info
	}
	var res scheduler.ModifyResult
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		res, err = s.ui.Scheduler().ModifyRun(ctx, r.ID, u.Username, u.IsApprover(), m)
		return err
	})
	var fe *scheduler.FieldError
	switch {
	case errors.As(err, &fe):
		label, ok := modifyFields[fe.Field]
		if !ok {
			label = fe.Field
		}
		refuse(label + ": " + fe.Message + ".")
		return
	case errors.Is(err, scheduler.ErrRunTooOld):
		refuse("this run started more than 30 days ago; submit it again instead.")
		return
	case err != nil:
		s.ui.Error(c, err)
		return
	}
	msg := "Run modified."
	switch {
	case res.Unapproved:
		msg = "Run modified; it must be approved again."
	case !res.Approved:
		msg = "Run modified; it waits for approval."
	}
	if res.Revived {
		msg += " It is running again."
	}
	s.ui.Flash(c, "success", msg)
	s.ui.Redirect(c, runPageURL(r))
}
