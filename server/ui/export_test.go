package ui

import (
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/ui/live"
)

// What the web UI's external tests (package ui_test, which drive the UI through the whole
// server) use of its insides.

var (
	CheckPassword    = checkPassword
	NormaliseEmail   = normaliseEmail
	AccountFuncs     = accountFuncs
	BaseFuncs        = baseFuncs
	MailtoURL        = mailtoURL
	SafeNext         = safeNext
	FinishedMaxCount = finishedMaxCount
	ViewOKHash       = viewOKHash
	ViewCountsOf     = viewCountsOf
)

const (
	UserKey          = userKey
	SessionCookie    = sessionCookie
	MaxFormBody      = maxFormBody
	FinishedCapAnon  = finishedCapAnon
	FinishedCapUser  = finishedCapUser
	RunsPageSize     = runsPageSize
	MachinesPageSize = machinesPageSize
	TasksPageSize    = tasksPageSize
	PresetBaseSHA    = ptBaseSHA
	PresetBaseBench  = ptBaseBench
)

// LiveLimits are s's bounds on live streams, which tests lower before the server serves.
func LiveLimits(s *Server) *live.Limits { return s.live.Limits }

// HeavyReads are s's slots for reads that scan, shared with the API.
func HeavyReads(s *Server) *guard.HeavyReads { return s.heavy }
