package people

import (
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/tokenpool"
)

// tuningData is the tuning page: the two sizes an operator can change on a running instance
// (the database token pool and the request_task semaphore) and what they are doing now.
type tuningData struct {
	ui.Page
	// Tokens is a snapshot of the token pool (threadpool_tokens).
	Tokens tokenpool.Stats
	// WaitTime is Tokens.WaitTime rounded for people; AvgWait the mean wait of the acquires
	// that had to wait ("" when none has).
	WaitTime, AvgWait string
	// TaskSemaphoreSize is the request_task semaphore's size (task_semaphore_size); 0 on a
	// secondary, which hands out no tasks.
	TaskSemaphoreSize int
	// PID is this process's id, for the reload command.
	PID int
	// Role is this instance's role now; Lease who holds the primary's lease (nil: unknown),
	// LeaseAge how long ago it was renewed.
	Role     string
	Lease    *protocol.LeaseInfo
	LeaseAge string
}

// TuningPage shows approvers the live sizes and how to change them: edit the config and send
// SIGHUP. Its own data are in-memory gauges, read before the layout's database work so that
// the page does not count itself. Like every page it waits in line for one token to read the
// logged-in user; when the pool is saturated, which is when this page is most wanted, the
// layout leaves out its pending sign-ups badge rather than wait a second time (see page).
func (s *Server) TuningPage(c *gin.Context) {
	if _, ok := s.ui.RequireApprover(c); !ok {
		return
	}
	st := s.deps.Tokens.Stats()
	d := tuningData{Tokens: st, WaitTime: roundDuration(st.WaitTime), PID: os.Getpid()}
	if st.Waited > 0 {
		// WaitTime also counts the waits that gave up; as an average over the acquires that
		// waited it is an upper bound, which is the side to err on.
		d.AvgWait = roundDuration(st.WaitTime / time.Duration(st.Waited))
	}
	if sched := s.ui.Scheduler(); sched != nil {
		d.TaskSemaphoreSize = sched.TaskSemaphoreSize()
	}
	d.Role = s.ui.Role().Name
	if l, ok := s.deps.Lease(c.Request.Context()); ok {
		d.Lease, d.LeaseAge = &l, roundDuration(time.Duration(l.AgeS*float64(time.Second)))
	}
	d.Page = s.ui.Page(c, "Tuning")
	s.ui.Render(c, http.StatusOK, "admin", d)
}

// roundDuration writes d with a precision that suits its size: "0s", "850µs", "12.4ms", "3.2s".
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}
