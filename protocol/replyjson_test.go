package protocol_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

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

// A request_task reply that hands out a task is left to encoding/json.
func TestATaskIsNotAppended(t *testing.T) {
	id := 3
	r := protocol.TaskReply{Run: &protocol.TaskRun{ID: "x", Args: json.RawMessage(`{}`)}, TaskID: &id}
	if b, ok := r.AppendJSON(nil); ok || len(b) != 0 {
		t.Errorf("appended %q", b)
	}
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
