package protocol

import (
	"encoding/json"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
)

// Every reply carries duration, the seconds the server spent on the call: fishtest's worker reads
// it unconditionally, so a reply without it breaks the worker, errors included.

// VersionReply is the reply to request_version.
type VersionReply struct {
	Version  int     `json:"version"`
	Duration float64 `json:"duration"`
}

// ErrorReply is the reply to a request the server refused (HTTP 400, 401, 404 or 500). Error
// reads "<api path>: <message>", e.g. "/api/update_task: stats: wins+losses+draws (10) !=
// 2*sum(pentanomial) (8)".
type ErrorReply struct {
	Error    string  `json:"error"`
	Duration float64 `json:"duration"`
}

// TaskReply is the reply to request_task. With a task, Run and TaskID are set. Without one,
// TaskWaiting is set (always to false, as fishtest does: the worker tests only that the key is
// present), maybe with Info (try again later) or Error (refused: blocked worker, duplicate
// worker, machine limit).
type TaskReply struct {
	TaskWaiting *bool    `json:"task_waiting,omitempty"`
	Info        string   `json:"info,omitempty"`
	Error       string   `json:"error,omitempty"`
	Run         *TaskRun `json:"run,omitempty"`
	TaskID      *int     `json:"task_id,omitempty"`
	// RetryAfter is Shoal's pacing hint, beyond fishtest: on a "too busy" or rate-limited
	// reply, the seconds to wait before asking again. fishtest's worker ignores it.
	RetryAfter *float64 `json:"retry_after,omitempty"`
	Duration   float64  `json:"duration"`
}

// TaskRun is the slice of a run that request_task hands a worker.
type TaskRun struct {
	ID string `json:"_id"`
	// Args is the run's args object as the server stores it, plus book_sri when the book is
	// known. ParseArgs gives the typed view of the fields a worker uses.
	Args   json.RawMessage `json:"args"`
	MyTask MyTask          `json:"my_task"`
}

// MyTask is the worker's task within the run.
type MyTask struct {
	// NumGames is the task's size, an even number of games.
	NumGames int `json:"num_games"`
	// Start is the index of the task's first game in the run, the worker's opening offset.
	Start int `json:"start"`
	// Stats are the results already recorded for the task (zero for a new task).
	Stats *Stats `json:"stats,omitempty"`
}

// RunArgs is the typed view of the run arguments a worker needs; other keys of args are ignored.
type RunArgs struct {
	BaseTag      string `json:"base_tag"`
	NewTag       string `json:"new_tag"`
	NumGames     int    `json:"num_games"`
	TC           string `json:"tc"`
	NewTC        string `json:"new_tc,omitempty"`
	Threads      int    `json:"threads"`
	Book         string `json:"book"`
	BookDepth    string `json:"book_depth"`
	BookSRI      string `json:"book_sri,omitempty"`
	BaseOptions  string `json:"base_options"`
	NewOptions   string `json:"new_options"`
	ResolvedBase string `json:"resolved_base"`
	ResolvedNew  string `json:"resolved_new"`
	// MsgBase and MsgNew are the commits' first lines (a person's tools show them; a worker
	// does not need them).
	MsgBase       string `json:"msg_base,omitempty"`
	MsgNew        string `json:"msg_new,omitempty"`
	BaseSignature string `json:"base_signature"`
	NewSignature  string `json:"new_signature"`
	TestsRepo     string `json:"tests_repo"`
	// Adjudication is nil when absent, which the worker reads as true.
	Adjudication *bool `json:"adjudication,omitempty"`
	// SPRT is set for SPRT runs, SPSA for tuning runs; neither for fixed-games runs.
	SPRT *SPRTArgs `json:"sprt,omitempty"`
	SPSA *SPSAArgs `json:"spsa,omitempty"`
}

// SPRTArgs are an SPRT run's test parameters and state. A worker needs BatchSize: it reports
// results in multiples of 2*BatchSize games.
type SPRTArgs struct {
	Alpha      float64 `json:"alpha"`
	Beta       float64 `json:"beta"`
	Elo0       float64 `json:"elo0"`
	Elo1       float64 `json:"elo1"`
	EloModel   string  `json:"elo_model"`
	State      string  `json:"state"`
	LLR        float64 `json:"llr"`
	BatchSize  int     `json:"batch_size"`
	LowerBound float64 `json:"lower_bound"`
	UpperBound float64 `json:"upper_bound"`
}

// SPSAArgs are an SPSA run's tuning parameters. A worker only needs to know they are present; it
// gets the values to play with from request_spsa.
type SPSAArgs struct {
	A         float64     `json:"A"`
	Alpha     float64     `json:"alpha"`
	Gamma     float64     `json:"gamma"`
	RawParams string      `json:"raw_params"`
	Iter      int         `json:"iter"`
	NumIter   int         `json:"num_iter"`
	Params    []SPSAParam `json:"params"`
}

// SPSAParam is one tuned parameter of an SPSA run.
type SPSAParam struct {
	Name  string  `json:"name"`
	Start float64 `json:"start"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	CEnd  float64 `json:"c_end"`
	REnd  float64 `json:"r_end"`
	C     float64 `json:"c"`
	AEnd  float64 `json:"a_end"`
	A     float64 `json:"a"`
	Theta float64 `json:"theta"`
}

// ParseArgs decodes Args into the typed view. Unknown keys are ignored; a key of the wrong type
// is an error.
func (r *TaskRun) ParseArgs() (RunArgs, error) {
	var a RunArgs
	if err := json.Unmarshal(r.Args, &a); err != nil {
		return RunArgs{}, fmt.Errorf("parse args of run %s: %w", r.ID, err)
	}
	return a, nil
}

// UpdateReply is the reply to update_task and beat, and to failed_task for a task that is no
// longer active. TaskAlive false tells the worker to stop the task.
type UpdateReply struct {
	TaskAlive bool    `json:"task_alive"`
	Info      string  `json:"info,omitempty"`
	Error     string  `json:"error,omitempty"`
	Duration  float64 `json:"duration"`
}

// SPSAReply is the reply to request_spsa. For an active task it carries the parameters for white
// and black and the signature to send back with the results; for an inactive one only TaskAlive
// false and Info. An absent sig reads as 0, as in fishtest's worker.
type SPSAReply struct {
	WParams   []SPSAWParam `json:"w_params,omitzero"`
	BParams   []SPSABParam `json:"b_params,omitzero"`
	Sig       uint32       `json:"sig,omitzero"`
	TaskAlive bool         `json:"task_alive"`
	Info      string       `json:"info,omitempty"`
	Duration  float64      `json:"duration"`
}

// SPSAWParam is a parameter for the engine under test: its perturbed value, the step C, the
// learning rate R and the sign Flip (+1 or -1) of the perturbation.
type SPSAWParam struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	C     float64 `json:"c"`
	R     float64 `json:"R"`
	Flip  int     `json:"flip"`
}

// SPSABParam is a parameter for the opponent, perturbed the other way.
type SPSABParam struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// DoneReply is the reply that carries nothing but the duration: stop_run, upload_pgn,
// worker_log, and failed_task for an active task (fishtest's {}).
type DoneReply struct {
	Duration float64 `json:"duration"`
}

// RetryLaterStatus is the status of the worker API's answer while the server cannot take the
// call: it is shutting down, or it is a secondary or a standby that does not schedule. The
// answer comes with a Retry-After header and a plain-text body that is deliberately not a JSON
// object: fishtest's worker gives up on a call whose reply holds "error" (an update's games are
// lost with its task) but retries one whose reply is not JSON, as from a server that is
// restarting, and so does Shoal's worker.
const RetryLaterStatus = 503

// DecodeReply decodes a reply into one of the reply types, matching keys exactly as fishtest's
// worker reads them (a Python dict): "Name" does not fill Name's "name". encoding/json would
// match it, and a server answering the wrong case would go unnoticed by a Go client while it
// breaks fishtest's. Unknown keys are ignored, as they are by fishtest's worker.
func DecodeReply(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v)
}

// DecodeReplyStrict is DecodeReply that also refuses a key the type does not name: the check
// that a reply has exactly the keys of its type.
func DecodeReplyStrict(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
}
