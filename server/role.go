package server

import (
	"context"
	"strings"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/ui"
)

// role is what this instance does now. A standby becomes the primary at run time, and a
// primary that lost its lease steps down, so handlers read the role once per request
// (s.role()) rather than from Deps.
type role struct {
	name string // "primary", "starting", "secondary" or "standby"
	// api and ui are the role as the API and the web UI read it: the primary's scheduler (nil
	// otherwise), where runs come from (the primary's cache, or the database) and, for live
	// pages, the primary's runcache.Cache.Changed (nil otherwise: live pages then poll).
	api api.Role
	ui  ui.Role
	// instance is the value of the X-Shoal-Instance header in this role (nil: none), made
	// once, not per reply.
	instance []string
}

// newRole is the role called name, scheduling with sched (nil: none) and serving runs from
// runs, with changed for live pages.
func newRole(name string, sched *scheduler.Scheduler, runs RunSource, changed func() <-chan struct{}) *role {
	r := &role{name: name, api: api.Role{Runs: runs, Starting: name == "starting"}, ui: ui.Role{Name: name, Runs: runs, Changed: changed}}
	if sched != nil { // a nil *Scheduler in an interface would not be nil
		r.api.Scheduler, r.ui.Scheduler = sched, sched
	}
	return r
}

// initialRole is the role Deps describe: the primary's if they hold a scheduler, otherwise the
// one Deps.Instance names ("standby@..." or "starting@...", a primary loading its runs, which
// Promote ends), or a secondary.
func initialRole(d Deps) *role {
	name := "secondary"
	switch n, _, _ := strings.Cut(d.Instance, "@"); {
	case d.Scheduler != nil:
		name = "primary"
	case n == "standby", n == "starting":
		name = n
	}
	return newRole(name, d.Scheduler, d.Runs, d.Changed)
}

func (s *Server) role() *role { return s.current.Load() }

// setRole makes r the role of the requests that start from now on.
func (s *Server) setRole(r *role) {
	if inst := s.instanceIn(r); inst != "" {
		r.instance = []string{inst}
	}
	s.current.Store(r)
}

// Promote makes this instance the primary, scheduling with sched and serving runs from runs
// (its run cache), with changed for live pages. Requests already running finish in the role
// they started in.
func (s *Server) Promote(sched *scheduler.Scheduler, runs RunSource, changed func() <-chan struct{}) {
	s.setRole(newRole("primary", sched, runs, changed))
	s.logger.Info("serving as the primary")
}

// Demote makes this instance serve as name ("standby" or "secondary") from runs (the
// database): worker calls are told to retry elsewhere.
func (s *Server) Demote(name string, runs RunSource) {
	s.setRole(newRole(name, nil, runs, nil))
	s.logger.Info("serving as " + name)
}

// Role is this instance's role now: "primary", "starting" (the primary, loading its runs),
// "secondary" or "standby".
func (s *Server) Role() string { return s.role().name }

// notPrimaryYet says why this instance sends what only the primary answers back to nginx, to
// try the next upstream: it is a standby, or a primary still loading its runs. "" otherwise.
func (s *Server) notPrimaryYet() string {
	switch s.role().name {
	case "standby":
		return "a standby; the primary answers this"
	case "starting":
		return "the primary is starting; it answers this once its runs are loaded"
	}
	return ""
}

// instance is the X-Shoal-Instance name now.
func (s *Server) instance() string { return s.instanceIn(s.role()) }

// instanceIn is the X-Shoal-Instance name in role r: its name and the address of
// Deps.Instance.
func (s *Server) instanceIn(r *role) string {
	if s.deps.Instance == "" {
		return ""
	}
	_, addr, ok := strings.Cut(s.deps.Instance, "@")
	if !ok {
		return s.deps.Instance
	}
	return r.name + "@" + addr
}

// LeaseInfo says which instance holds the primary's lease, for /healthz and the admin page.
type LeaseInfo = protocol.LeaseInfo

// LeaseReader reads the primary's lease (rundb.DB.Lease); nil means no lease is kept.
type LeaseReader func(ctx context.Context) (LeaseInfo, error)
