package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/server/api"
)

// readyTimeout bounds /readyz's database check: a probe must answer, not hang with the
// database.
const readyTimeout = 2 * time.Second

// healthz answers 200 while the process serves (liveness): requests are answered once the
// database is open (connections made earlier wait in the listen backlog; a primary then
// answers, as "starting", while it loads its runs), and shutdownGuard answers 503 once shutdown
// has begun. It says what this instance is now and, when the database tells within a second,
// which instance holds the primary's lease.
func (s *Server) healthz(c *gin.Context) {
	h := protocol.HealthReply{Status: "ok", Version: s.deps.Version, Role: s.Role(), Instance: s.instance()}
	if l, ok := s.lease(c.Request.Context()); ok {
		h.Primary = &l
	}
	c.JSON(http.StatusOK, h)
}

// lease reads who holds the primary's lease, within a second; false if it cannot be told.
func (s *Server) lease(ctx context.Context) (LeaseInfo, bool) {
	if s.deps.Lease == nil {
		return LeaseInfo{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	l, err := s.deps.Lease(ctx)
	return l, err == nil
}

// readyz answers 200 when this instance should get traffic (readiness): its database answers,
// its role is known (a primary loading its runs is not ready yet), and it is not shutting down
// (shutdownGuard answers 503 then). A failed check is a 503 naming it, so a load balancer takes
// the instance out until it recovers.
func (s *Server) readyz(c *gin.Context) {
	role := s.Role()
	if s.deps.DB == nil {
		api.Error(c, http.StatusServiceUnavailable, "no database")
		return
	}
	if role == "starting" {
		c.Header("Retry-After", "5")
		api.Error(c, http.StatusServiceUnavailable, "starting: the primary is loading its runs")
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
	defer cancel()
	if err := s.deps.DB.Ping(ctx); err != nil {
		s.logger.Warn("not ready: the database does not answer", "err", err)
		c.Header("Retry-After", "5")
		api.Error(c, http.StatusServiceUnavailable, "the database does not answer")
		return
	}
	c.JSON(http.StatusOK, protocol.ReadyReply{Status: "ready", Role: role, Instance: s.instance(), Version: s.deps.Version})
}
