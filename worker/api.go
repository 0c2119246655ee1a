// Package worker is Shoal's worker client: it speaks fishtest's worker protocol to a Shoal (or
// fishtest) server, asks for tasks, plays them with a GameSource in batches and reports the
// results, with fishtest's worker semantics (reference section 9).
//
// The package imports protocol (the wire contract), and for real games (EngineSource)
// worker/match, worker/uci and worker/build; nothing of the server's side.
package worker

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// Task is what a GameSource plays: one task of a run as request_task described it.
type Task struct {
	RunID    string
	TaskID   int
	NumGames int // games of the whole task
	// Start is the opening offset: the index in the run of the first game to play. Play gets the
	// offset of its batch's first game (the task's start plus the games already played).
	Start int
	Args  protocol.RunArgs
}

// SPSAParams are the perturbed values for one SPSA batch (request_spsa's reply): W for the
// engine under test, B for its opponent, and the signature to send back with the results.
type SPSAParams struct {
	W   []protocol.SPSAWParam
	B   []protocol.SPSABParam
	Sig uint32
}

// Batch is the outcome of playing some game pairs: counts for those pairs only (not cumulative).
// Stats.Wins+Losses+Draws must equal 2*sum(Pentanomial). PGN is the games' text, appended to the
// task's upload.
type Batch struct {
	Stats protocol.Stats
	PGN   string
}

// GameSource plays game pairs; simulated now, real UCI engines later. Play plays pairs game
// pairs (2*pairs games) of task t, with spsa's values when the run is an SPSA run, and returns
// their counts. An error that is a *RunError (errors.As) blames the run and makes the worker send
// stop_run; a *build.Error fails the task with the build's message (protocol.BuildFailedPrefix),
// by which the server stops a run that several workers failed to build; any other error fails
// the task (failed_task). A source that returns because ctx ended may return ctx.Err().
type GameSource interface {
	Play(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error)
}

// RunError is a GameSource failure that is the run's fault, not the worker's (a bench that does
// not match the run's signature): the worker sends stop_run with Message, as fishtest's worker
// does on its RunException.
type RunError struct {
	Message string
}

func (e *RunError) Error() string { return e.Message }

// Observer sees every call a worker makes (for the fleet's report). All methods must be safe
// for concurrent use; a nil Observer is allowed.
type Observer interface {
	// Request is called after every HTTP call: endpoint is the API name ("request_task"),
	// status the HTTP status (0 when there was no response), reply the decoded JSON object (nil
	// when it was not one) and err the transport or decoding error, if any.
	Request(endpoint string, took time.Duration, status int, reply map[string]any, err error)
	// TaskStarted is called when request_task gave the worker a task.
	TaskStarted(runID string, taskID, numGames int)
	// Accepted is called for each update_task the server recorded, with the cumulative stats
	// sent and the reply's task_alive: a reply without "error", except the "task R/T is not
	// active" reply (task_alive false with "info"), which records nothing. Stats are
	// cumulative, so an update retried after a lost reply is harmless.
	Accepted(runID string, taskID int, cumulative protocol.Stats, alive bool)
	// Unanswered is called for each update_task that got no usable reply (none, cut short,
	// or not JSON), with the cumulative stats it sent: the server may have recorded them or
	// not, and nobody can tell which.
	Unanswered(runID string, taskID int, cumulative protocol.Stats)
	// TaskEnded is called when the worker is done with a task that TaskStarted announced, with
	// how it ended.
	TaskEnded(runID string, taskID int, how TaskEnd)
}

// TaskEnd is how a worker's task ended.
type TaskEnd string

const (
	// TaskFinished: every game played, or the server said no more are needed (task_alive false).
	TaskFinished TaskEnd = "finished"
	// TaskFailed: the worker gave the task up and sent failed_task (its games since the last
	// accepted update are lost): a game source error, an update the server refused or that
	// found no server for five attempts, an invalid request_spsa reply.
	TaskFailed TaskEnd = "failed"
	// TaskStoppedRun: the game source blamed the run and the worker sent stop_run.
	TaskStoppedRun TaskEnd = "stopped the run"
	// TaskAbandoned: a beat's reply said the task is gone (task_alive false or "error"), and
	// the worker dropped it without telling the server, as fishtest's heartbeat does.
	TaskAbandoned TaskEnd = "abandoned"
	// TaskStopped: a graceful stop (StopFile or the end of the worker's run) ended it.
	TaskStopped TaskEnd = "stopped"
	// TaskInterrupted: the worker's context ended mid-task (the worker vanished).
	TaskInterrupted TaskEnd = "interrupted"
)

// Config configures one Worker. Zero values get defaults (see New).
type Config struct {
	// ServerURL is the server's base URL, e.g. "http://127.0.0.1:8000"; "/api/..." is appended.
	ServerURL, Username, Password string
	// Concurrency is the cores the worker plays with (default 1); MaxMemory its memory in MiB
	// (default: what fishtest's worker needs for STC games, see New); MinThreads the smallest
	// per-engine thread count (default 1).
	Concurrency, MaxMemory, MinThreads int
	// UniqueKey is the full worker key (a uuid4, maybe with a prefix); NewUniqueKey makes one.
	// Empty: New makes a fresh one without prefix.
	UniqueKey string
	// WorkerArch, Compiler, ARCH and Uname fill worker_info; sensible defaults when empty
	// ("unknown", "g++", "?", "<GOOS> shoal-worker").
	WorkerArch, Compiler, ARCH, Uname string
	// GCCVersion is the version of Compiler in worker_info (a building worker's, from
	// build.DetectCompiler); zero: 9.3.0, fishtest's minimum, for a worker that builds nothing.
	GCCVersion [3]int
	// TimeScale compresses time: the heartbeat period (120 s), the backoff (15 s to 900 s) and the
	// update_task retry delay (15 s) are divided by it. 0 means 1.
	TimeScale float64
	// RetryDelay is the wait between two attempts of a call that must reach the server
	// (update_task, request_spsa, failed_task, stop_run, upload_pgn): five attempts in all. 0
	// means fishtest's 15 s divided by TimeScale. A test that restarts its server under a
	// compressed clock sets it so that the attempts still span the restart, as fishtest's
	// minute does for a real one.
	RetryDelay time.Duration
	// HTTPClient is used for every call and may be shared by a fleet; default: a client with a
	// 30 s timeout, as fishtest's worker. The worker uses a copy of it whose redirect policy
	// refuses to redirect a POST (it carries the password) and then defers to HTTPClient's.
	HTTPClient *http.Client
	// RoundTripper, if set, takes every call instead of HTTPClient, as a single round trip: no
	// redirect is followed, no cookie kept and no timeout added, so it must bound each call
	// itself. A fleet of simulated workers sets its own transport here, saving each call the
	// copies of header and URL an http.Client makes for redirects.
	RoundTripper http.RoundTripper
	// Logger gets the worker's log; default: slog.Default().
	Logger *slog.Logger
	// Observer sees every call; may be nil.
	Observer Observer
	// StopFile, if set and the file exists, makes the worker finish the current batch, report it
	// and exit cleanly (fishtest's fish.exit).
	StopFile string
	// MaxTasks bounds the tasks the worker takes; 0 means unlimited.
	MaxTasks int
	// PGNCompression is the gzip level of the PGN upload, from gzip.HuffmanOnly to
	// gzip.BestCompression; 0 means gzip.DefaultCompression (gzip.NoCompression cannot be
	// chosen). A fleet of simulated workers, whose compression is its generator's cost, uses
	// gzip.BestSpeed.
	PGNCompression int
}
