package people

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
)

// quarantineAction is the event log's kind for a quarantine and its lifting (the scheduler
// writes the quarantine, this page the lifting).
const quarantineAction = "quarantine"

// offenderRow is a user whose machines were quarantined more than once, for approvers.
type offenderRow struct {
	Username    string
	Quarantines int // over all the user's machines, lifted or not
	Machines    int // machines ever quarantined
	Now         int // machines quarantined now
}

// offenders lists the users whose machines were quarantined more than once in all, most
// quarantines first: a volunteer whose machines keep failing is worth an approver's word.
func (s *Server) offenders(ctx context.Context) ([]offenderRow, error) {
	ws, err := s.deps.Workers.Quarantined(ctx)
	if err != nil {
		return nil, err
	}
	by := map[string]*offenderRow{}
	for _, w := range ws {
		owner := workerOwner(w.WorkerName)
		if owner == "" {
			continue
		}
		r := by[owner]
		if r == nil {
			r = &offenderRow{Username: owner}
			by[owner] = r
		}
		r.Quarantines += w.Quarantines
		r.Machines++
		if w.Blocked && w.Quarantined {
			r.Now++
		}
	}
	var out []offenderRow
	for _, r := range by {
		if r.Quarantines > 1 {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b offenderRow) int {
		if a.Quarantines != b.Quarantines {
			return b.Quarantines - a.Quarantines
		}
		return strings.Compare(a.Username, b.Username)
	})
	return out, nil
}

// liftQuarantine is the approver's one click that lifts a machine's quarantine: the machine
// gets tasks again (the scheduler starts its record afresh at its next request) and the
// lifting is logged. Anyone else, or a machine not quarantined, gets an error page and
// nothing changes.
func (s *Server) liftQuarantine(c *gin.Context, u *rundb.User, name string) {
	if !u.IsApprover() {
		s.ui.PageError(c, http.StatusForbidden, "Only an approver may lift a quarantine. Nothing was changed.")
		return
	}
	var notQuarantined bool
	if !s.ui.Do(c, func(ctx context.Context) error {
		w, err := s.deps.Workers.Get(ctx, name)
		switch {
		case errors.Is(err, rundb.ErrNotFound):
			notQuarantined = true
			return nil
		case err != nil:
			return err
		case !w.Blocked || !w.Quarantined:
			notQuarantined = true
			return nil
		}
		reason := w.Message
		w.Blocked, w.Quarantined, w.BlockedBy, w.BlockedByApprover = false, false, "", false
		w.Message = ""
		if err := s.deps.Workers.Put(ctx, w); err != nil {
			return err
		}
		return s.deps.Actions.Insert(ctx, &rundb.Action{Action: quarantineAction, Username: u.Username,
			Worker: name, Message: "lifted (" + reason + ")"})
	}) {
		return
	}
	if notQuarantined {
		s.ui.PageError(c, http.StatusBadRequest, "Worker "+name+" is not quarantined: there is no quarantine to lift. Nothing was changed.")
		return
	}
	s.ui.Flash(c, "success", "The quarantine of worker "+name+" is lifted: it gets tasks again.")
	s.ui.Redirect(c, "/workers/show")
}
