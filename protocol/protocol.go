// Package protocol is the JSON of fishtest's worker API, shared by Shoal's server and Shoal's
// worker. It holds the request and reply shapes, the validation fishtest applies to requests
// (its vtjson api_access_schema and api_schema), and the worker naming rule; and the request
// that creates a run (RunRequest), which the web form, the JSON API and their clients share.
//
// Every exported value is immutable or plainly a value, so everything here is safe for
// concurrent use. The package imports nothing of Shoal's: the worker depends on it alone.
package protocol

import (
	"strconv"
	"strings"
)

// Version is the worker protocol version (fishtest's WORKER_VERSION). The server returns it from
// request_version; a worker older than it updates itself.
const Version = 325

// WorkerInfo is the worker_info object a worker sends with every request. In a validated
// Request all 16 keys were present and met fishtest's constraints. The server adds remote_addr
// and country_code itself before storing it in a task; they are not part of the request.
type WorkerInfo struct {
	// Uname is the system name and release, e.g. "Linux 6.1.0", maybe with " (colab)".
	Uname string `json:"uname"`
	// Architecture is Python's platform.architecture(), e.g. ["64bit", "ELF"].
	Architecture [2]string `json:"architecture"`
	// Concurrency is the number of cores the worker plays with (> 0).
	Concurrency int `json:"concurrency"`
	// MaxMemory is the memory the worker may use, in MiB (>= 0).
	MaxMemory int `json:"max_memory"`
	// MinThreads is the smallest per-engine thread count the worker accepts (> 0).
	MinThreads int `json:"min_threads"`
	// Username is the fishtest account the worker logs in with.
	Username string `json:"username"`
	// Version is the worker's own protocol version.
	Version int `json:"version"`
	// PythonVersion is the interpreter's major, minor and micro version.
	PythonVersion [3]int `json:"python_version"`
	// GCCVersion is the version of the compiler in Compiler, gcc or clang alike.
	GCCVersion [3]int `json:"gcc_version"`
	// Compiler is "g++" or "clang++".
	Compiler string `json:"compiler"`
	// UniqueKey is a uuid4 whose first segment may be replaced by a 2 to 8 character prefix.
	UniqueKey string `json:"unique_key"`
	// Modified is true when the worker's files differ from fishtest's published checksums.
	Modified bool `json:"modified"`
	// WorkerArch is the Stockfish build architecture, one of fishtest's supported arches or
	// "unknown".
	WorkerArch string `json:"worker_arch"`
	// ARCH is the CPU feature string the engine reports ("?" until the first bench).
	ARCH string `json:"ARCH"`
	// NPS is the measured nodes per second of the base engine (0 until the first bench).
	NPS float64 `json:"nps"`
	// NearGithubAPILimit asks for tasks the worker has built before, to spare GitHub calls.
	NearGithubAPILimit bool `json:"near_github_api_limit"`
}

// ShortName is fishtest's short worker name, "{username}-{concurrency}cores-{first segment of
// unique_key}", used to detect duplicate workers and to block one.
func (w WorkerInfo) ShortName() string { return w.name(true) }

// LongName is fishtest's worker name as shown in actions and on pages: the short name, the second
// segment of unique_key and a "*" for a modified worker.
func (w WorkerInfo) LongName() string { return w.name(false) }

func (w WorkerInfo) name(short bool) string {
	var b strings.Builder
	b.WriteString(w.Username)
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(w.Concurrency))
	b.WriteString("cores")
	if w.UniqueKey != "" {
		first, rest, hasRest := strings.Cut(w.UniqueKey, "-")
		b.WriteByte('-')
		b.WriteString(first)
		if hasRest && !short {
			second, _, _ := strings.Cut(rest, "-")
			b.WriteByte('-')
			b.WriteString(second)
		}
	}
	if w.Modified && !short {
		b.WriteByte('*')
	}
	return b.String()
}

// Stats are a task's results, cumulative over the whole task: the worker sends all the games it
// has played for the task so far, never just the last batch. Pentanomial[i] counts game pairs
// whose pair score is i/2: [LL, LD+DL, LW+DD+WL, DW+WD, WW].
type Stats struct {
	Wins        int    `json:"wins"`
	Losses      int    `json:"losses"`
	Draws       int    `json:"draws"`
	Crashes     int    `json:"crashes"`
	TimeLosses  int    `json:"time_losses"`
	Pentanomial [5]int `json:"pentanomial"`
}

// Add returns the sum of two results, cell by cell: a task's cumulative stats plus a batch, or a
// run's total over its tasks.
func (s Stats) Add(o Stats) Stats {
	s.Wins += o.Wins
	s.Losses += o.Losses
	s.Draws += o.Draws
	s.Crashes += o.Crashes
	s.TimeLosses += o.TimeLosses
	for i := range s.Pentanomial {
		s.Pentanomial[i] += o.Pentanomial[i]
	}
	return s
}

// SPSAResult is the outcome of one SPSA batch: the games played with the parameters of the last
// request_spsa reply, and that reply's signature. Sig is an int, not a uint32, because fishtest
// accepts any non-negative integer here and only then compares it with the CRC it sent.
type SPSAResult struct {
	Wins     int `json:"wins"`
	Losses   int `json:"losses"`
	Draws    int `json:"draws"`
	NumGames int `json:"num_games"`
	Sig      int `json:"sig"`
}

// Request is the body of every authenticated worker call. A nil pointer is an absent key; the
// endpoints differ only in which optional keys they need (update_task: RunID, TaskID, Stats and
// maybe SPSA; upload_pgn: PGN; failed_task, stop_run and worker_log: Message).
type Request struct {
	Password   string      `json:"password"`
	RunID      *string     `json:"run_id,omitempty"`
	TaskID     *int        `json:"task_id,omitempty"`
	PGN        *string     `json:"pgn,omitempty"`
	Message    *string     `json:"message,omitempty"`
	WorkerInfo WorkerInfo  `json:"worker_info"`
	SPSA       *SPSAResult `json:"spsa,omitempty"`
	Stats      *Stats      `json:"stats,omitempty"`
}
