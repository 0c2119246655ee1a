package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
)

// Stopping and modifying a run without the UI: the JSON twins of the run page's stop and modify
// forms (fishtest's /tests/stop and /tests/modify), with create_run's credentials (an api token
// as a Bearer, or a username and password in the body) and the same rule as the page: the run's
// owner or an approver. /api/user_stop_run is not fishtest's /api/stop_run, which is a worker's
// report of a broken task.

// userStopRunBody is POST /api/user_stop_run.
type userStopRunBody struct {
	Username string `json:"username"`
	Password string `json:"password"`
	RunID    string `json:"run_id"`
}

// modifyRunBody is POST /api/modify_run: the fields given replace the run's, the others keep
// their value.
type modifyRunBody struct {
	Username   string  `json:"username"`
	Password   string  `json:"password"`
	RunID      string  `json:"run_id"`
	NumGames   *int    `json:"num_games"`
	Priority   *int    `json:"priority"`
	Throughput *int    `json:"throughput"`
	AutoPurge  *bool   `json:"auto_purge"`
	Info       *string `json:"info"`
}

// errNotOwner means an authenticated user who neither owns the run nor approves runs acted on
// it; errNotOwnInfo that someone other than the owner tried to change its description.
var (
	errNotOwner   = errors.New("not the run's owner or an approver")
	errNotOwnInfo = errors.New("not the run's owner")
)

// UserStopRun finishes a run, for its owner or an approver, as the run page's stop button.
func (s *Server) UserStopRun(c *gin.Context) {
	var body userStopRunBody
	id, ok := s.runActionStart(c, &body, func() string { return body.RunID })
	if !ok {
		return
	}
	u, ok, err := s.submitLogin(c, body.Username, body.Password)
	if !ok {
		return
	}
	if err == nil {
		err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			if _, err := s.ownRun(ctx, u, id); err != nil {
				return err
			}
			return s.scheduler().StopRunByUser(ctx, id, u.Username)
		})
	}
	if s.runActionError(c, err, u, id, "stop") {
		return
	}
	c.JSON(http.StatusOK, protocol.StopRunReply{Stopped: true, Duration: duration(c)})
}

// ModifyRun changes a run's game budget, priority, throughput, auto-purge and (for its owner)
// description, for its owner or an approver, as the run page's modify form. A field left out
// keeps the run's value. A refused modification changes nothing: a value out of range is a 400
// naming its field, a run started more than 30 days ago a 409.
func (s *Server) ModifyRun(c *gin.Context) {
	var body modifyRunBody
	id, ok := s.runActionStart(c, &body, func() string { return body.RunID })
	if !ok {
		return
	}
	if body.NumGames == nil && body.Priority == nil && body.Throughput == nil && body.AutoPurge == nil && body.Info == nil {
		Error(c, http.StatusBadRequest, "nothing to modify: give one or more of num_games, priority, throughput, auto_purge, info")
		return
	}
	u, ok, err := s.submitLogin(c, body.Username, body.Password)
	if !ok {
		return
	}
	var res scheduler.ModifyResult
	if err == nil {
		err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			r, err := s.ownRun(ctx, u, id)
			if err != nil {
				return err
			}
			if body.Info != nil && u.Username != r.Args.Username {
				return errNotOwnInfo
			}
			m := scheduler.RunModification{NumGames: r.Args.NumGames, Priority: int(r.Args.Priority),
				Throughput: int(r.Args.Throughput), AutoPurge: r.Args.AutoPurge, Info: body.Info}
			setIf(&m.NumGames, body.NumGames)
			setIf(&m.Priority, body.Priority)
			setIf(&m.Throughput, body.Throughput)
			setIf(&m.AutoPurge, body.AutoPurge)
			res, err = s.scheduler().ModifyRun(ctx, id, u.Username, u.IsApprover(), m)
			return err
		})
	}
	var fe *scheduler.FieldError
	switch {
	case errors.As(err, &fe):
		Error(c, http.StatusBadRequest, fe.Error())
	case errors.Is(err, errNotOwnInfo):
		Error(c, http.StatusForbidden, fmt.Sprintf("info: only the owner of run %s may change its description", id))
	case errors.Is(err, scheduler.ErrRunTooOld):
		Error(c, http.StatusConflict, fmt.Sprintf("run %s started more than 30 days ago and can no longer be modified; submit it again instead", id))
	case s.runActionError(c, err, u, id, "modify"):
	default:
		c.JSON(http.StatusOK, protocol.ModifyRunReply{Approved: res.Approved, Unapproved: res.Unapproved,
			Revived: res.Revived, Duration: duration(c)})
	}
}

// runActionStart reads a run action's body into v on the primary and parses the run id it
// names (runID reads it from v once filled); false once it has answered (503 or 400).
func (s *Server) runActionStart(c *gin.Context, v any, runID func() string) (rundb.ObjectID, bool) {
	if !s.requirePrimary(c, submitToPrimary) || !decodeSubmission(c, v) {
		return rundb.ObjectID{}, false
	}
	raw := runID()
	if raw == "" {
		Error(c, http.StatusBadRequest, "run_id: missing")
		return rundb.ObjectID{}, false
	}
	id, err := rundb.ParseObjectID(raw)
	if err != nil {
		Error(c, http.StatusBadRequest, "run_id: "+err.Error())
		return rundb.ObjectID{}, false
	}
	return id, true
}

// ownRun returns run id if u owns it or approves runs, else errNotOwner.
func (s *Server) ownRun(ctx context.Context, u *rundb.User, id rundb.ObjectID) (*rundb.Run, error) {
	r, err := s.runs().Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Args.Username != u.Username && !u.IsApprover() {
		return nil, errNotOwner
	}
	return r, nil
}

// runActionError answers the errors common to the run actions, reporting whether it answered:
// false for a nil err.
func (s *Server) runActionError(c *gin.Context, err error, u *rundb.User, id rundb.ObjectID, what string) bool {
	switch {
	case err == nil:
		return false
	case isAuthError(err):
		Error(c, http.StatusUnauthorized, err.Error())
	case errors.Is(err, errNotOwner):
		Error(c, http.StatusForbidden, fmt.Sprintf("user %s may not %s run %s: only its owner or an approver may", u.Username, what, id))
	case errors.Is(err, rundb.ErrNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("run %s not found", id))
	default:
		s.internalError(c, err)
	}
	return true
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
