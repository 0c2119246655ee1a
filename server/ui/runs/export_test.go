package runs

import "github.com/shoal-chess/shoal/server/ui/live"

// What the run pages' external tests (package runs_test, which drive the pages through the
// whole server) use of their insides.

var (
	FinishedMaxCount = finishedMaxCount
	ViewOKHash       = viewOKHash
	ViewCountsOf     = viewCountsOf
)

const (
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
