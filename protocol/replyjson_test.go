package protocol_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shoal-chess/shoal/protocol"
)

// jsonAppender is a reply that writes its own JSON.
type jsonAppender interface {
	AppendJSON(b []byte) ([]byte, bool)
}

// replyStrings are strings that take every path of JSON string escaping: HTML, control
// characters, quotes, invalid UTF-8, the line separators, and plain text.
var replyStrings = []string{
	"", "Task not active", "/api/beat: stats: wins+losses+draws (10) != 2*sum(pentanomial) (8)",
	`quote " backslash \ slash /`, "<script>&amp;</script>", "\x00\x01\x08\t\n\v\f\r\x1f\x7f",
	"caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff utf-8 \xe2\x80", "\xed\xa0\x80 surrogate", "tab\tend",
	strings.Repeat("é<", 40),
}

// replyFloats are durations and pacing hints at every boundary of encoding/json's float format.
var replyFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1.25e-5, 1e-6, 9.999999e-7, 1e-7, 5e-324,
	1e20, 1e21, 123456789012345678901234.0, math.MaxFloat64, -1e-9, 0.1 + 0.2, 30, 2.5e-10}

// Every reply that writes its own JSON writes exactly what encoding/json writes for the same
// value, with any appended-to prefix kept.
func TestRepliesAppendWhatMarshalWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	float := func() float64 {
		if rng.IntN(2) == 0 {
			return replyFloats[rng.IntN(len(replyFloats))]
		}
		return math.Float64frombits(rng.Uint64()) // anything, NaN and infinities included
	}
	ints := []int{0, 1, -1, 17, math.MaxInt, math.MinInt}
	for i := range 20000 {
		d := float()
		waiting, id, retry := rng.IntN(2) == 0, ints[rng.IntN(len(ints))], float()
		task := protocol.TaskReply{Info: pick(replyStrings), Error: pick(replyStrings), Duration: d}
		if rng.IntN(2) == 0 {
			task.TaskWaiting = &waiting
		}
		if rng.IntN(3) == 0 {
			task.TaskID = &id
		}
		if rng.IntN(2) == 0 {
			task.RetryAfter = &retry
		}
		for _, r := range []jsonAppender{
			&protocol.UpdateReply{TaskAlive: rng.IntN(2) == 0, Info: pick(replyStrings), Error: pick(replyStrings), Duration: d},
			&protocol.VersionReply{Version: ints[rng.IntN(len(ints))], Duration: d},
			&protocol.ErrorReply{Error: pick(replyStrings), Duration: d},
			&protocol.DoneReply{Duration: d},
			&task,
		} {
			want, err := json.Marshal(r)
			got, ok := r.AppendJSON([]byte("prefix"))
			if ok != (err == nil) {
				t.Fatalf("case %d: %#v: appended %v, encoding/json's error %v", i, r, ok, err)
			}
			if !ok {
				if string(got) != "prefix" {
					t.Fatalf("case %d: %#v: refused but appended %q", i, r, got)
				}
				continue
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("case %d: %#v:\n got %s\nwant prefix%s", i, r, got, want)
			}
		}
	}
}

// replyArgs are run args as a reply may carry them: compact or not, with what encoding/json
// escapes in a raw message, and some it refuses or copies as they are (not JSON, not UTF-8, a
// byte-order mark, empty).
var replyArgs = []string{
	`{}`, `{"tc": "10+0.1", "book": "UHO_4060_v3.epd", "threads": 1, "sprt": {"elo0": 0, "elo1": 2.5}}`,
	" {\n\t\"new_options\" : \"Hash=16 < 32 & > 8\" ,\r\n \"a\": [ 1 , 2.5e-3, true, null ] } ",
	"{\"msg\": \"line \\u2028 sep \u2028 and \u2029 end\"," + ` "q": "a \" quote \\ and \/ <b>"}`,
	`{"café": "😀"}`, `[1, {"a": []}]`, `"just a string"`, `12`,
	"{\"bad\": \"\xff\"}", "\xef\xbb\xbf{}", `{"a": }`, `{"a": 1} {}`, ``, `  `,
}

// A request_task reply that hands out a task writes what encoding/json writes, its run's args
// compacted and escaped as encoding/json does a raw message, or leaves the reply to
// encoding/json when encoding/json would refuse it or copy the args as they are.
func TestATaskIsAppendedAsMarshalWritesIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ints := []int{0, 1, -1, 17, 1000000, math.MaxInt, math.MinInt}
	pick := func() int { return ints[rng.IntN(len(ints))] }
	for i := range 5000 {
		id := pick()
		run := &protocol.TaskRun{ID: replyStrings[rng.IntN(len(replyStrings))],
			MyTask: protocol.MyTask{NumGames: pick(), Start: pick()}}
		if n := rng.IntN(len(replyArgs) + 1); n < len(replyArgs) {
			run.Args = json.RawMessage(replyArgs[n])
		} // else nil: null
		if rng.IntN(3) > 0 {
			run.MyTask.Stats = &protocol.Stats{Wins: pick(), Losses: pick(), Draws: pick(), Crashes: pick(),
				TimeLosses: pick(), Pentanomial: [5]int{pick(), pick(), pick(), pick(), pick()}}
		}
		r := protocol.TaskReply{Run: run, TaskID: &id, Duration: replyFloats[rng.IntN(len(replyFloats))]}
		if rng.IntN(4) == 0 {
			r.Info = "extra"
		}
		want, err := json.Marshal(&r)
		got, ok := r.AppendJSON([]byte("prefix"))
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("case %d: refused but appended %q", i, got)
			}
			if err == nil && utf8.Valid(run.Args) {
				t.Fatalf("case %d: %s: refused valid args encoding/json writes as %s", i, run.Args, want)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("case %d: %q:\n got %s\nwant prefix%s (%v)", i, run.Args, got, want, err)
		}
	}
}

// FuzzTaskArgs holds a task reply's args to encoding/json's writing of a raw message, on any
// bytes: the same text, or a refusal where encoding/json refuses them or copies them as they
// are (not UTF-8).
func FuzzTaskArgs(f *testing.F) {
	for _, a := range replyArgs {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		r := protocol.TaskReply{Run: &protocol.TaskRun{ID: "65a1b2c3d4e5f60718293a4b", Args: args}, Duration: 0.001}
		want, err := json.Marshal(&r)
		got, ok := r.AppendJSON(nil)
		switch {
		case ok && (err != nil || !bytes.Equal(got, want)):
			t.Fatalf("%q:\n got %s\nwant %s (%v)", args, got, want, err)
		case !ok && err == nil && utf8.Valid(args) && !bytes.HasPrefix(args, []byte("\xef\xbb\xbf")):
			t.Fatalf("%q: refused, but encoding/json writes %s", args, want)
		}
	})
}

// FuzzReplyStrings holds the string escaping to encoding/json's on any text.
func FuzzReplyStrings(f *testing.F) {
	for _, s := range replyStrings {
		f.Add(s, 0.001)
	}
	f.Fuzz(func(t *testing.T, s string, d float64) {
		r := protocol.UpdateReply{Info: s, Error: s, Duration: d}
		want, err := json.Marshal(&r)
		got, ok := r.AppendJSON(nil)
		if ok != (err == nil) || ok && !bytes.Equal(got, want) {
			t.Fatalf("%q %v:\n got %s %v\nwant %s %v", s, d, got, ok, want, err)
		}
	})
}
