package protocol_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// legacy stands in for fishtest's legacy_usernames: one account from before the username rule.
func legacy(u string) bool { return u == "old.timer" }

// edit changes one key of a test body: raw is the new value's JSON text, or "" to delete the key.
type edit struct{ path, raw string }

func set(path, raw string) edit { return edit{path, raw} }
func del(path string) edit      { return edit{path, ""} }

// edited returns base with the edits applied.
func edited(t testing.TB, base string, edits ...edit) []byte {
	t.Helper()
	m := object(t, base)
	for _, e := range edits {
		obj := m
		keys := strings.Split(e.path, ".")
		for _, k := range keys[:len(keys)-1] {
			inner, ok := obj[k].(map[string]any)
			if !ok {
				t.Fatalf("edit %q: %q is not an object in the base body", e.path, k)
			}
			obj = inner
		}
		last := keys[len(keys)-1]
		if e.raw == "" {
			delete(obj, last)
		} else {
			obj[last] = json.RawMessage(e.raw)
		}
	}
	return encode(t, m)
}

type requestCase struct {
	name  string
	body  string // the body verbatim; if empty, base (default updateTaskBody) with edits
	base  string
	edits []edit
	field string // the offending field of an invalid request; "" for a valid one
	want  string // text the error must contain, besides the field
}

func (c requestCase) bytes(t testing.TB) []byte {
	if c.body != "" {
		return []byte(c.body)
	}
	base := c.base
	if base == "" {
		base = updateTaskBody
	}
	return edited(t, base, c.edits...)
}

func runRequestCases(t *testing.T, cases []requestCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.bytes(t)
			checkIndexedAgrees(t, body)
			r, err := protocol.DecodeRequest(body, legacy)
			if c.field == "" {
				if err != nil {
					t.Fatalf("valid request rejected: %v\nbody: %s", err, body)
				}
				if r == nil {
					t.Fatal("nil request without an error")
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid request accepted: %+v\nbody: %s", r, body)
			}
			var ve *protocol.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
			}
			if ve.Field != c.field || !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q names field %q, want %q", err, ve.Field, c.field)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestDecodeRequestAcceptsWhatFishtestAccepts(t *testing.T) {
	runRequestCases(t, []requestCase{
		{name: "a typical update_task body", body: updateTaskBody},
		{name: "a request_task body, without run_id or task_id", body: requestTaskBody},
		{name: "an SPSA update with spsa results beside the stats", body: spsaUpdateBody},
		{name: "an upload_pgn body with pgn and an empty message", body: uploadPGNBody},
		{name: "run_id without task_id", edits: []edit{del("task_id")}},
		{name: "task_id zero", edits: []edit{set("task_id", "0")}},
		{name: "task_id minus zero, which Python reads as 0", edits: []edit{set("task_id", "-0")}},
		{name: "a run_id in upper-case hex, which ObjectId.is_valid accepts", edits: []edit{set("run_id", `"65A1B2C3D4E5F60718293A4B"`)}},
		{name: "a worker_log body: message and no task", edits: []edit{del("task_id"), del("run_id"), del("stats"), set("message", `"fastchess warning"`)}},
		{name: "stats with zero games", edits: []edit{set("stats", `{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,0,0,0]}`)}},
		{name: "stats with every pair a draw pair (DD)", edits: []edit{set("stats", `{"wins":0,"losses":0,"draws":8,"crashes":0,"time_losses":0,"pentanomial":[0,0,4,0,0]}`)}},
		{name: "stats with every pair split WL (draws may be fewer than 2*p2)", edits: []edit{set("stats", `{"wins":4,"losses":4,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,4,0,0]}`)}},
		{name: "stats whose sums overflow 64 bits but add up exactly", edits: []edit{set("stats", `{"wins":4611686018427387904,"losses":4611686018427387904,"draws":9223372036854775806,"crashes":0,"time_losses":0,"pentanomial":[0,0,9223372036854775807,0,0]}`)}},
		{name: "spsa results with zero games", edits: []edit{set("spsa", `{"wins":0,"losses":0,"draws":0,"num_games":0,"sig":0}`)}},
		{name: "nps an integer", edits: []edit{set("worker_info.nps", "0")}},
		{name: "nps with an exponent", edits: []edit{set("worker_info.nps", "1.5E6")}},
		{name: "nps minus zero", edits: []edit{set("worker_info.nps", "-0.0")}},
		{name: "nps so small it rounds to zero", edits: []edit{set("worker_info.nps", "1e-400")}},
		{name: "max_memory zero", edits: []edit{set("worker_info.max_memory", "0")}},
		{name: "version zero", edits: []edit{set("worker_info.version", "0")}},
		{name: "an int as large as an int64 can be", edits: []edit{set("worker_info.version", "9223372036854775807")}},
		{name: "the largest concurrency and max_memory", edits: []edit{set("worker_info.concurrency", "1024"), set("worker_info.max_memory", "67108864")}},
		{name: "worker_arch unknown", edits: []edit{set("worker_info.worker_arch", `"unknown"`)}},
		{name: "compiler clang++", edits: []edit{set("worker_info.compiler", `"clang++"`)}},
		{name: "a two-character username", edits: []edit{set("worker_info.username", `"ab"`)}},
		{name: "a legacy username the callback knows", edits: []edit{set("worker_info.username", `"old.timer"`)}},
		{name: "a unique_key with an 8-character prefix", edits: []edit{set("worker_info.unique_key", `"ABCdef12-5a28-4b7d-b27b-d78d97ecf11a"`)}},
		{name: "a unique_key with a 2-character prefix", edits: []edit{set("worker_info.unique_key", `"x9-5a28-4b7d-b27b-d78d97ecf11a"`)}},
		{name: "empty uname, ARCH and architecture strings", edits: []edit{set("worker_info.uname", `""`), set("worker_info.ARCH", `""`), set("worker_info.architecture", `["",""]`)}},
		{name: "a repeated key, whose last value counts as in Python", body: `{"password": 1, "password": "secret"` + updateTaskBody[len(`{"password": "secret"`):]},
		{name: "a key spelt with a JSON escape", body: `{"pass\u0077ord"` + updateTaskBody[len(`{"password"`):]},
		{name: "a compiler spelt with a JSON escape", edits: []edit{set("worker_info.compiler", `"g\u002b+"`)}},
		{name: "a UTF-8 byte order mark before the body", body: "\xef\xbb\xbf" + updateTaskBody},
		{name: "whitespace around the body", body: " \n\t" + updateTaskBody + "\r\n "},
		{name: "non-ASCII text in uname and message", edits: []edit{set("worker_info.uname", `"Linux 6.1 ✓ (colab)"`), set("message", `"Ünïcödé \ud83d\ude00"`)}},
	})
}

func TestEveryFishtestArchIsAccepted(t *testing.T) {
	arches := protocol.SupportedArches()
	if len(arches) != 29 {
		t.Errorf("fishtest lists 29 supported arches, got %d", len(arches))
	}
	for _, arch := range arches {
		body := edited(t, updateTaskBody, set("worker_info.worker_arch", `"`+arch+`"`))
		r, err := protocol.DecodeRequest(body, nil)
		if err != nil {
			t.Errorf("worker_arch %q rejected: %v", arch, err)
		} else if r.WorkerInfo.WorkerArch != arch {
			t.Errorf("worker_arch %q decoded as %q", arch, r.WorkerInfo.WorkerArch)
		}
	}
}

func TestDecodeRequestRejectsWhatFishtestRejects(t *testing.T) {
	stats := func(s string) []edit { return []edit{set("stats", s)} }
	spsa := func(s string) []edit { return []edit{set("spsa", s)} }
	wi := func(key, raw string) []edit { return []edit{set("worker_info."+key, raw)} }
	runRequestCases(t, []requestCase{
		// The body.
		{name: "an array body", body: `[1, 2]`, field: "request", want: "is not a JSON object"},
		{name: "a string body", body: `"password"`, field: "request", want: "is not a JSON object"},
		{name: "a null body", body: `null`, field: "request", want: "is not a JSON object"},
		{name: "an empty object", body: `{}`, field: "request", want: `missing key "password"`},
		{name: "an unknown top-level key", edits: []edit{set("foo", "1")}, field: "request", want: `unknown key "foo"`},
		{name: "a key differing only in case", edits: []edit{set("Stats", "{}")}, field: "request", want: `unknown key "Stats"`},
		{name: "the server-only host_url key", edits: []edit{set("host_url", `"http://x"`)}, field: "request", want: "host_url"},

		// password.
		{name: "no password", edits: []edit{del("password")}, field: "request", want: `missing key "password"`},
		{name: "a numeric password", edits: []edit{set("password", "1234")}, field: "password", want: "is not a string"},
		{name: "a null password", edits: []edit{set("password", "null")}, field: "password", want: "is not a string"},

		// run_id and task_id.
		{name: "a run_id of 23 hex digits", edits: []edit{set("run_id", `"65a1b2c3d4e5f60718293a4"`)}, field: "run_id", want: "65a1b2c3d4e5f60718293a4"},
		{name: "a run_id of 25 hex digits", edits: []edit{set("run_id", `"65a1b2c3d4e5f60718293a4b5"`)}, field: "run_id", want: "ObjectId"},
		{name: "a run_id with a non-hex digit", edits: []edit{set("run_id", `"65a1b2c3d4e5f60718293a4g"`)}, field: "run_id", want: "ObjectId"},
		{name: "a numeric run_id", edits: []edit{set("run_id", "12")}, field: "run_id", want: "12"},
		{name: "a null run_id", edits: []edit{set("run_id", "null")}, field: "run_id", want: "null"},
		{name: "a fractional task_id", edits: []edit{set("task_id", "1.5")}, field: "task_id", want: "1.5 is not a non-negative integer"},
		{name: "a task_id written as a float", edits: []edit{set("task_id", "1.0")}, field: "task_id", want: "1.0"},
		{name: "a task_id with an exponent", edits: []edit{set("task_id", "1e1")}, field: "task_id", want: "1e1"},
		{name: "a negative task_id", edits: []edit{set("task_id", "-1")}, field: "task_id", want: "-1 is not a non-negative integer"},
		{name: "a task_id in a string", edits: []edit{set("task_id", `"1"`)}, field: "task_id", want: `"1"`},
		{name: "a boolean task_id", edits: []edit{set("task_id", "true")}, field: "task_id", want: "true"},
		{name: "a task_id beyond int64", edits: []edit{set("task_id", "9223372036854775808")}, field: "task_id", want: "out of range"},
		{name: "a task_id far beyond int64", edits: []edit{set("task_id", "123456789012345678901234567890")}, field: "task_id", want: "out of range"},
		{name: "a task_id without a run_id", edits: []edit{del("run_id")}, field: "run_id", want: "task_id"},

		// pgn and message.
		{name: "a numeric pgn", edits: []edit{set("pgn", "0")}, field: "pgn", want: "is not a string"},
		{name: "a boolean message", edits: []edit{set("message", "false")}, field: "message", want: "is not a string"},

		// worker_info as a whole.
		{name: "no worker_info", edits: []edit{del("worker_info")}, field: "request", want: `missing key "worker_info"`},
		{name: "a worker_info that is a string", edits: []edit{set("worker_info", `"fakeworker"`)}, field: "worker_info", want: "is not a JSON object"},
		{name: "an unknown worker_info key", edits: wi("foo", "1"), field: "worker_info", want: `unknown key "foo"`},
		{name: "the server-only remote_addr in worker_info", edits: wi("remote_addr", `"1.2.3.4"`), field: "worker_info", want: "remote_addr"},
		{name: "worker_info without nps", edits: []edit{del("worker_info.nps")}, field: "worker_info", want: `missing key "nps"`},
		{name: "worker_info without uname", edits: []edit{del("worker_info.uname")}, field: "worker_info", want: `missing key "uname"`},

		// worker_info fields.
		{name: "a numeric uname", edits: wi("uname", "6"), field: "worker_info.uname", want: "is not a string"},
		{name: "an architecture of one string", edits: wi("architecture", `["64bit"]`), field: "worker_info.architecture", want: "array of 2 strings"},
		{name: "an architecture of three strings", edits: wi("architecture", `["64bit","ELF","x"]`), field: "worker_info.architecture", want: "array of 2 strings"},
		{name: "an architecture that is a string", edits: wi("architecture", `"64bit"`), field: "worker_info.architecture", want: "array"},
		{name: "an architecture holding a number", edits: wi("architecture", `["64bit",64]`), field: "worker_info.architecture[1]", want: "is not a string"},
		{name: "concurrency zero", edits: wi("concurrency", "0"), field: "worker_info.concurrency", want: "0 is not a positive integer"},
		{name: "a negative concurrency", edits: wi("concurrency", "-1"), field: "worker_info.concurrency", want: "-1 is not a positive integer"},
		{name: "a concurrency of 2**40 (security finding 4)", edits: wi("concurrency", "1099511627776"), field: "worker_info.concurrency", want: "is over the limit of 1024"},
		{name: "a max_memory beyond 64 TiB", edits: wi("max_memory", "67108865"), field: "worker_info.max_memory", want: "is over the limit of 67108864"},
		{name: "concurrency true (a bool is not an int)", edits: wi("concurrency", "true"), field: "worker_info.concurrency", want: "true"},
		{name: "concurrency written as a float", edits: wi("concurrency", "4.0"), field: "worker_info.concurrency", want: "4.0"},
		{name: "concurrency in a string", edits: wi("concurrency", `"4"`), field: "worker_info.concurrency", want: `"4"`},
		{name: "a number beyond int64 with a fraction", edits: wi("concurrency", "123456789012345678901234.5"), field: "worker_info.concurrency", want: "is not a positive integer"},
		{name: "concurrency beyond int64", edits: wi("concurrency", "18446744073709551620"), field: "worker_info.concurrency", want: "out of range"},
		{name: "a negative max_memory", edits: wi("max_memory", "-1"), field: "worker_info.max_memory", want: "-1 is not a non-negative integer"},
		{name: "min_threads zero", edits: wi("min_threads", "0"), field: "worker_info.min_threads", want: "positive"},
		{name: "a one-character username", edits: wi("username", `"a"`), field: "worker_info.username", want: `"a"`},
		{name: "a username with a space", edits: wi("username", `"bad name"`), field: "worker_info.username", want: "username"},
		{name: "a username with a non-ASCII letter", edits: wi("username", `"héllo"`), field: "worker_info.username", want: "héllo"},
		{name: "a legacy-looking username the callback does not know", edits: wi("username", `"new.timer"`), field: "worker_info.username", want: "new.timer"},
		{name: "a numeric username", edits: wi("username", "42"), field: "worker_info.username", want: "is not a string"},
		{name: "a negative version", edits: wi("version", "-325"), field: "worker_info.version", want: "-325"},
		{name: "a fractional version", edits: wi("version", "325.5"), field: "worker_info.version", want: "325.5"},
		{name: "a python_version of two numbers", edits: wi("python_version", "[3,11]"), field: "worker_info.python_version", want: "array of 3"},
		{name: "a python_version with a negative number", edits: wi("python_version", "[3,-1,0]"), field: "worker_info.python_version[1]", want: "-1"},
		{name: "a python_version with a string", edits: wi("python_version", `[3,11,"2"]`), field: "worker_info.python_version[2]", want: `"2"`},
		{name: "a gcc_version that is a string", edits: wi("gcc_version", `"13.2.0"`), field: "worker_info.gcc_version", want: "13.2.0"},
		{name: "a gcc_version of four numbers", edits: wi("gcc_version", "[13,2,0,1]"), field: "worker_info.gcc_version", want: "array of 3"},
		{name: "compiler clang without ++", edits: wi("compiler", `"clang"`), field: "worker_info.compiler", want: `"clang"`},
		{name: "compiler in another case", edits: wi("compiler", `"G++"`), field: "worker_info.compiler", want: `"G++"`},
		{name: "a null compiler", edits: wi("compiler", "null"), field: "worker_info.compiler", want: "null"},
		{name: "a unique_key with upper-case hex after the prefix", edits: wi("unique_key", `"ab12cd34-5A28-4b7d-b27b-d78d97ecf11a"`), field: "worker_info.unique_key", want: "5A28"},
		{name: "a unique_key with a one-character prefix", edits: wi("unique_key", `"a-5a28-4b7d-b27b-d78d97ecf11a"`), field: "worker_info.unique_key", want: "unique key"},
		{name: "a unique_key with a nine-character prefix", edits: wi("unique_key", `"abcdefghi-5a28-4b7d-b27b-d78d97ecf11a"`), field: "worker_info.unique_key", want: "abcdefghi"},
		{name: "a unique_key missing a segment", edits: wi("unique_key", `"ab12cd34-5a28-4b7d-d78d97ecf11a"`), field: "worker_info.unique_key", want: "unique key"},
		{name: "a unique_key with a trailing newline", edits: wi("unique_key", `"ab12cd34-5a28-4b7d-b27b-d78d97ecf11a\n"`), field: "worker_info.unique_key", want: "unique key"},
		{name: "a unique_key with a short last segment", edits: wi("unique_key", `"ab12cd34-5a28-4b7d-b27b-d78d97ecf11"`), field: "worker_info.unique_key", want: "unique key"},
		{name: "modified as a string", edits: wi("modified", `"no"`), field: "worker_info.modified", want: "is not a boolean"},
		{name: "modified as 0", edits: wi("modified", "0"), field: "worker_info.modified", want: "is not a boolean"},
		{name: "an unsupported worker_arch", edits: wi("worker_arch", `"x86-64-avx3"`), field: "worker_info.worker_arch", want: "x86-64-avx3"},
		{name: "an empty worker_arch", edits: wi("worker_arch", `""`), field: "worker_info.worker_arch", want: "supported"},
		{name: "a numeric ARCH", edits: wi("ARCH", "64"), field: "worker_info.ARCH", want: "is not a string"},
		{name: "a negative nps", edits: wi("nps", "-1.5"), field: "worker_info.nps", want: "-1.5 is not a non-negative number"},
		{name: "nps in a string", edits: wi("nps", `"0"`), field: "worker_info.nps", want: `"0"`},
		{name: "nps true", edits: wi("nps", "true"), field: "worker_info.nps", want: "true"},
		{name: "nps beyond a float64", edits: wi("nps", "1e400"), field: "worker_info.nps", want: "1e400"},
		{name: "near_github_api_limit as 1", edits: wi("near_github_api_limit", "1"), field: "worker_info.near_github_api_limit", want: "boolean"},

		// spsa.
		{name: "spsa that is a list", edits: spsa("[1,2]"), field: "spsa", want: "is not a JSON object"},
		{name: "spsa with an unknown key", edits: spsa(`{"wins":0,"losses":0,"draws":0,"num_games":0,"sig":0,"iter":1}`), field: "spsa", want: `unknown key "iter"`},
		{name: "spsa without sig", edits: spsa(`{"wins":0,"losses":0,"draws":0,"num_games":0}`), field: "spsa", want: `missing key "sig"`},
		{name: "spsa with an odd num_games", edits: spsa(`{"wins":1,"losses":0,"draws":0,"num_games":1,"sig":0}`), field: "spsa.num_games", want: "1 is not even"},
		{name: "spsa whose games do not add up", edits: spsa(`{"wins":1,"losses":2,"draws":3,"num_games":8,"sig":0}`), field: "spsa", want: "wins+losses+draws (6) != num_games (8)"},
		{name: "spsa with negative wins", edits: spsa(`{"wins":-2,"losses":2,"draws":0,"num_games":0,"sig":0}`), field: "spsa.wins", want: "-2"},
		{name: "spsa with a float sig", edits: spsa(`{"wins":0,"losses":0,"draws":0,"num_games":0,"sig":1.5}`), field: "spsa.sig", want: "1.5"},
		{name: "spsa with a negative sig", edits: spsa(`{"wins":0,"losses":0,"draws":0,"num_games":0,"sig":-1}`), field: "spsa.sig", want: "-1"},

		// stats.
		{name: "stats that is a number", edits: stats("200"), field: "stats", want: "is not a JSON object"},
		{name: "stats with an unknown key", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,0,0,0],"elo":1}`), field: "stats", want: `unknown key "elo"`},
		{name: "stats without time_losses", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"pentanomial":[0,0,0,0,0]}`), field: "stats", want: `missing key "time_losses"`},
		{name: "stats without pentanomial", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0}`), field: "stats", want: `missing key "pentanomial"`},
		{name: "stats with a boolean wins", edits: stats(`{"wins":false,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,0,0,0]}`), field: "stats.wins", want: "false"},
		{name: "stats with negative crashes", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":-1,"time_losses":0,"pentanomial":[0,0,0,0,0]}`), field: "stats.crashes", want: "-1"},
		{name: "a pentanomial of four counts", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,0,0]}`), field: "stats.pentanomial", want: "array of 5"},
		{name: "a pentanomial with a negative count", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,0,0,-1,0]}`), field: "stats.pentanomial[3]", want: "-1"},
		{name: "games that are not twice the pairs", edits: stats(`{"wins":4,"losses":3,"draws":3,"crashes":0,"time_losses":0,"pentanomial":[0,1,2,1,0]}`), field: "stats", want: "wins+losses+draws (10) != 2*sum(pentanomial) (8)"},
		{name: "wins minus losses that the pairs do not give", edits: stats(`{"wins":3,"losses":2,"draws":3,"crashes":0,"time_losses":0,"pentanomial":[0,1,2,1,0]}`), field: "stats", want: "wins-losses (1) != 2*pentanomial[4]+pentanomial[3]-pentanomial[1]-2*pentanomial[0] (0)"},
		{name: "more draws than the pairs allow", edits: stats(`{"wins":0,"losses":0,"draws":4,"crashes":0,"time_losses":0,"pentanomial":[1,0,0,0,1]}`), field: "stats", want: "draws (4) > pentanomial[3]+2*pentanomial[2]+pentanomial[1] (0)"},
		{name: "fewer draws than the pairs need", edits: stats(`{"wins":2,"losses":2,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[0,1,0,1,0]}`), field: "stats", want: "draws (0) < pentanomial[3]+pentanomial[1] (2)"},
		{name: "pairs whose doubled sum wraps to zero in 64 bits", edits: stats(`{"wins":0,"losses":0,"draws":0,"crashes":0,"time_losses":0,"pentanomial":[4611686018427387904,0,0,0,4611686018427387904]}`), field: "stats", want: "!= 2*sum(pentanomial) (18446744073709551616)"},
	})
}

func TestValidationErrorsReadAsDocumented(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"a negative concurrency", edited(t, updateTaskBody, set("worker_info.concurrency", "-1")), "worker_info.concurrency: -1 is not a positive integer"},
		{"stats that do not add up", edited(t, updateTaskBody, set("stats", `{"wins":4,"losses":3,"draws":3,"crashes":0,"time_losses":0,"pentanomial":[0,1,2,1,0]}`)), "stats: wins+losses+draws (10) != 2*sum(pentanomial) (8)"},
		{"an unknown key", edited(t, updateTaskBody, set("foo", "1")), `request: unknown key "foo"`},
		{"a missing nps", edited(t, updateTaskBody, del("worker_info.nps")), `worker_info: missing key "nps"`},
		{"a long non-ASCII value, cut between characters", edited(t, updateTaskBody, set("worker_info.compiler", `"`+strings.Repeat("é", 100)+`"`)), "worker_info.compiler: \"" + strings.Repeat("é", 49) + `... (truncated) is not one of "clang++", "g++"`},
		{"a long value, cut", edited(t, updateTaskBody, set("worker_info.uname", strings.Repeat("7", 300))), "worker_info.uname: " + strings.Repeat("7", 100) + "... (truncated) is not a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := protocol.DecodeRequest(c.body, legacy)
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestAPasswordOfTheWrongTypeIsNotEchoed(t *testing.T) {
	body := edited(t, updateTaskBody, set("password", "31415926535"))
	_, err := protocol.DecodeRequest(body, legacy)
	if err == nil || strings.Contains(err.Error(), "31415926535") {
		t.Errorf("error %v: want a rejection that does not quote the password", err)
	}
	_, _, err = protocol.DecodeAccess(body)
	if err == nil || strings.Contains(err.Error(), "31415926535") {
		t.Errorf("access error %v: want a rejection that does not quote the password", err)
	}
}

func TestBodiesThatAreNotJSON(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"an empty body", ""},
		{"only whitespace", " \n"},
		{"an unfinished object", `{"password": "secret"`},
		{"a form-encoded body", "password=secret&username=fakeworker"},
		{"trailing text after the object", updateTaskBody + "x"},
		{"two objects", updateTaskBody + updateTaskBody},
		{"a trailing comma", `{"password": "secret",}`},
		{"single quotes", `{'password': 'secret'}`},
		{"Python's NaN, which Go's JSON does not have", strings.Replace(updateTaskBody, "1234567.8", "NaN", 1)},
		{"invalid UTF-8 in a string", strings.Replace(updateTaskBody, "Linux", "Lin\xffux", 1)},
		{"a raw control character in a string", strings.Replace(updateTaskBody, "Linux", "Lin\x01ux", 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := protocol.DecodeRequest([]byte(c.body), legacy); !errors.Is(err, protocol.ErrNotJSON) {
				t.Errorf("DecodeRequest: error %v, want ErrNotJSON", err)
			}
			if _, _, err := protocol.DecodeAccess([]byte(c.body)); !errors.Is(err, protocol.ErrNotJSON) {
				t.Errorf("DecodeAccess: error %v, want ErrNotJSON", err)
			}
		})
	}
	if got := protocol.ErrNotJSON.Error(); got != "request is not json encoded" {
		t.Errorf("ErrNotJSON reads %q, want fishtest's text", got)
	}
}

func TestDecodeRequestFillsEveryField(t *testing.T) {
	r, err := protocol.DecodeRequest([]byte(spsaUpdateBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	runID, taskID := "65a1b2c3d4e5f60718293a4b", 0
	want := &protocol.Request{
		Password: "secret",
		RunID:    &runID,
		TaskID:   &taskID,
		WorkerInfo: protocol.WorkerInfo{
			Uname: "Darwin 23.1.0", Architecture: [2]string{"64bit", ""}, Concurrency: 8, MaxMemory: 0,
			MinThreads: 2, Username: "Tuner42", Version: 325, PythonVersion: [3]int{3, 12, 0},
			GCCVersion: [3]int{15, 0, 0}, Compiler: "clang++", UniqueKey: "Mac1-0a1b-2c3d-4e5f-0123456789ab",
			Modified: true, WorkerArch: "apple-silicon", ARCH: "?", NPS: 0, NearGithubAPILimit: true,
		},
		SPSA:  &protocol.SPSAResult{Wins: 3, Losses: 2, Draws: 3, NumGames: 8, Sig: 3735928559},
		Stats: &protocol.Stats{Wins: 3, Losses: 2, Draws: 3, Pentanomial: [5]int{0, 1, 1, 2, 0}},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", r, want)
	}
	if r.PGN != nil || r.Message != nil {
		t.Errorf("absent pgn and message decoded as present: %v %v", r.PGN, r.Message)
	}

	// The last of repeated keys wins, in nested objects too.
	body := strings.Replace(updateTaskBody, `"concurrency": 16,`, `"concurrency": 16, "concurrency": 3,`, 1)
	if r, err := protocol.DecodeRequest([]byte(body), nil); err != nil || r.WorkerInfo.Concurrency != 3 {
		t.Errorf("repeated concurrency: got %+v, %v; want the last value, 3", r, err)
	}
	// An escaped string is unescaped.
	body = strings.Replace(updateTaskBody, `"password": "secret"`, `"password": "se\"cr\u00e9t\\"`, 1)
	if r, err := protocol.DecodeRequest([]byte(body), nil); err != nil || r.Password != `se"crét\` {
		t.Errorf("escaped password: got %+v, %v", r, err)
	}
}

func TestDecodeAccess(t *testing.T) {
	for _, c := range []struct {
		name, body         string
		username, password string
		field, want        string // of an error
	}{
		{name: "a request_version body", body: `{"password": "secret", "worker_info": {"username": "fakeworker"}}`, username: "fakeworker", password: "secret"},
		{name: "a full request_task body", body: requestTaskBody, username: "fakeworker", password: "secret"},
		{name: "extra keys anywhere are ignored (lax)", body: `{"x": [1, {"y": null}], "password": "", "worker_info": {"username": "u", "concurrency": "lots"}, "z": true}`, username: "u", password: ""},
		{name: "a username that fails the pattern is left to authentication", body: `{"password": "p", "worker_info": {"username": "a b"}}`, username: "a b", password: "p"},
		{name: "an array body", body: `[]`, field: "request", want: "is not a JSON object"},
		{name: "no password", body: `{"worker_info": {"username": "u"}}`, field: "request", want: `missing key "password"`},
		{name: "a numeric password", body: `{"password": 1, "worker_info": {"username": "u"}}`, field: "password", want: "is not a string"},
		{name: "no worker_info", body: `{"password": "p"}`, field: "request", want: `missing key "worker_info"`},
		{name: "a worker_info that is a list", body: `{"password": "p", "worker_info": ["u"]}`, field: "worker_info", want: "is not a JSON object"},
		{name: "no username", body: `{"password": "p", "worker_info": {"user": "u"}}`, field: "worker_info", want: `missing key "username"`},
		{name: "a null username", body: `{"password": "p", "worker_info": {"username": null}}`, field: "worker_info.username", want: "null is not a string"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, p, err := protocol.DecodeAccess([]byte(c.body))
			if c.field == "" {
				if err != nil || u != c.username || p != c.password {
					t.Errorf("got %q, %q, %v; want %q, %q", u, p, err, c.username, c.password)
				}
				return
			}
			var ve *protocol.ValidationError
			if !errors.As(err, &ve) || ve.Field != c.field || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want field %q and %q", err, c.field, c.want)
			}
		})
	}
}

// The server reads each call's body into a buffer that the next call reuses, once the call is
// answered: what Access and Request return must not refer to the body, or a stored worker_info
// would change with the next call's bytes. Escaped strings take another path than plain ones.
func TestDecodedRequestOutlivesItsBody(t *testing.T) {
	escaped := strings.Replace(updateTaskBody, `"uname": "Linux`, `"uname": "L\u0069nux`, 1)
	for name, body := range map[string]string{"update_task": updateTaskBody, "spsa": spsaUpdateBody,
		"upload_pgn": uploadPGNBody, "escaped": escaped, "failed_task": strings.Replace(uploadPGNBody, `"message": ""`, `"message": "engine crashed"`, 1)} {
		buf := []byte(body)
		p, err := protocol.ParseBody(buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		user, password, err := p.Access()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := p.Request(legacy)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := protocol.DecodeRequest([]byte(body), legacy)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range buf {
			buf[i] = 'x'
		}
		if user != want.WorkerInfo.Username || password != want.Password {
			t.Errorf("%s: the credentials changed with the body: %q %q", name, user, password)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the request changed with the body:\n got %+v\nwant %+v", name, got, want)
		}
	}
}
