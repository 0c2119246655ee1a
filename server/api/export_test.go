package api

import (
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/tokenpool"
)

// What the API's external tests (package api_test, which drive the API through the whole
// server) use of its insides.

var (
	DecodePGNUpload   = decodePGNUpload
	ParseActionFilter = parseActionFilter
	PythonTime        = pythonTime
	DecodeStrict      = decodeStrict
	NNAcceptsGzip     = nnAcceptsGzip
	ActionFilterKeys  = actionFilterKeys
	CheckPGNText      = checkPGNText
	ReadBody          = readBody
	ToWorkerInfo      = toWorkerInfo
	TaskResults       = taskResults
)

type CreateRunBody = createRunBody

const (
	MaxActions                 = maxActions
	MaxActionsBody             = maxActionsBody
	MaxSubmitBody              = maxSubmitBody
	MaxConcurrentUploads       = maxConcurrentUploads
	TaskLimitedInfo            = taskLimitedInfo
	TaskRequestBurstPerMachine = taskRequestBurstPerMachine
	PaceFloor                  = paceFloor
	APITooManyLoginsText       = apiTooManyLoginsText
)

// RunJSONStripped is runJSON's stripped view of r, as /api/get_run gives it.
func RunJSONStripped(r *rundb.Run) (map[string]any, error) { return runJSON(r, stripped) }

// Uploads are s's upload slots.
func Uploads(s *Server) *tokenpool.Pool { return s.uploads }

// SetTaskLimits replaces s's request_task limits with those of a server whose workers beat
// every heartbeat.
func SetTaskLimits(s *Server, heartbeat time.Duration) { s.taskLimits = newTaskLimiter(heartbeat) }

// NetworkFile is the stored file of the network called name, as s finds it.
func NetworkFile(s *Server, name string) string { return s.deps.NetworkFile(name) }
