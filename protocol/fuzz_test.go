package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shoal-chess/shoal/protocol"
)

// FuzzDecodeRequest feeds DecodeRequest arbitrary bodies. It must never panic; whatever it
// accepts must satisfy fishtest's schema as checked here independently (regular expressions,
// big-integer arithmetic, encoding/json's view of the keys), must be JSON, and must survive a
// marshal and decode unchanged; whatever it rejects must be rejected with one of the two
// documented errors.
func FuzzDecodeRequest(f *testing.F) {
	for _, b := range []string{requestTaskBody, updateTaskBody, spsaUpdateBody, uploadPGNBody} {
		f.Add([]byte(b))
	}
	// Near misses: one rule broken, or a corner of JSON.
	for _, c := range []struct{ old, new string }{
		{`"task_id": 17`, `"task_id": 1.0`},
		{`"task_id": 17`, `"task_id": -0`},
		{`"task_id": 17`, `"task_id": 99999999999999999999`},
		{`"concurrency": 16`, `"concurrency": true`},
		{`"concurrency": 16`, `"concurrency": 16, "concurrency": 0`},
		{`"nps": 1234567.8`, `"nps": 1e400`},
		{`"nps": 1234567.8`, `"nps": -0.0`},
		{`"draws": 99`, `"draws": 98`},
		{`[5, 20, 46, 25, 4]`, `[5, 20, 46, 25]`},
		{`"password"`, `"pass\u0077ord"`},
		{`"run_id": "65a1b2c3d4e5f60718293a4b", `, ``},
		{`"unique_key": "ab12cd34`, `"unique_key": "ab12cd345`},
		{`"username": "fakeworker"`, `"username": "old.timer"`},
		{`"worker_arch": "x86-64-avx2"`, `"worker_arch": "x86-64-avx2\u0000"`},
		{`"compiler": "g++"`, `"compiler": "g\u002b+"`},
		{`"stats": {`, `"stats": {"elo": 1, `},
		{`"ARCH": "`, `"ARCH": "\ud800`},
	} {
		f.Add([]byte(strings.Replace(updateTaskBody, c.old, c.new, 1)))
	}
	f.Add([]byte(`{"password": "p", "worker_info": {}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte("\xef\xbb\xbf{}"))

	// Keys the server's index of a body must find as collect does: repeated, escaped, a
	// worker_info or stats that is not an object after one that is.
	f.Add([]byte(strings.Replace(updateTaskBody, `"password"`, `"worker_info": 5, "password"`, 1)))
	f.Add([]byte(strings.Replace(updateTaskBody, `"password"`, `"worker_\u0069nfo": {"username": "x"}, "password"`, 1)))
	f.Add([]byte(updateTaskBody[:len(updateTaskBody)-1] + `, "worker_info": "w"}`))
	f.Add([]byte(updateTaskBody[:len(updateTaskBody)-1] + `, "worker_info": {"username": "other"}}`))
	f.Add([]byte(strings.Replace(updateTaskBody, `"username": "fakeworker"`, `"username": "fakeworker", "username": "wrk", "usern\u0061me": 7`, 1)))
	f.Add([]byte(updateTaskBody[:len(updateTaskBody)-1] + `, "stats": {"wins": 1}}`))
	f.Add([]byte(updateTaskBody[:len(updateTaskBody)-1] + `, "stats": [1]}`))
	f.Add([]byte(strings.Replace(updateTaskBody, `"stats": {`, `"stats": {"wins": 0}, "st\u0061ts": {`, 1)))

	f.Fuzz(func(t *testing.T, body []byte) {
		checkIndexedAgrees(t, body)
		if _, _, err := protocol.DecodeAccess(body); err != nil {
			checkRejection(t, body, err)
		}
		r, err := protocol.DecodeRequest(body, legacy)
		if err != nil {
			checkRejection(t, body, err)
			return
		}
		checkAccepted(t, body, r)

		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal an accepted request: %v", err)
		}
		again, err := protocol.DecodeRequest(out, legacy)
		if err != nil {
			t.Fatalf("re-encoded request rejected: %v\nbody: %q\nre-encoded: %s", err, body, out)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded request decodes differently:\n%+v\n%+v", again, r)
		}
		u, p, err := protocol.DecodeAccess(body)
		if err != nil || u != r.WorkerInfo.Username || p != r.Password {
			t.Fatalf("DecodeAccess disagrees with DecodeRequest: %q %q %v", u, p, err)
		}
	})
}

var (
	usernameRE  = regexp.MustCompile(`^[A-Za-z0-9]{2,}$`)
	uniqueKeyRE = regexp.MustCompile(`^[0-9a-zA-Z]{2,8}(-[a-f0-9]{4}){3}-[a-f0-9]{12}$`)
	objectIDRE  = regexp.MustCompile(`^[0-9a-fA-F]{24}$`)
)

func checkRejection(t *testing.T, body []byte, err error) {
	t.Helper()
	trimmed := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	isJSON := utf8.Valid(trimmed) && json.Valid(trimmed)
	var ve *protocol.ValidationError
	switch {
	case errors.Is(err, protocol.ErrNotJSON):
		if isJSON {
			t.Fatalf("valid JSON reported as not JSON: %q", body)
		}
	case errors.As(err, &ve):
		if !isJSON {
			t.Fatalf("invalid JSON reported as a validation error %v: %q", err, body)
		}
		if ve.Field == "" || ve.Message == "" {
			t.Fatalf("validation error without a field or a message: %#v", ve)
		}
	default:
		t.Fatalf("undocumented error %v (%T)", err, err)
	}
}

// checkAccepted re-validates an accepted request without the package's own code.
func checkAccepted(t *testing.T, body []byte, r *protocol.Request) {
	t.Helper()
	trimmed := bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if !utf8.Valid(trimmed) || !json.Valid(trimmed) {
		t.Fatalf("accepted a body that is not JSON: %q", body)
	}
	// encoding/json's view: the same keys, the same values.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		t.Fatalf("accepted a body that is not an object: %v", err)
	}
	allowed := []string{"password", "run_id", "task_id", "pgn", "message", "worker_info", "spsa", "stats"}
	for k := range top {
		if !slices.Contains(allowed, k) {
			t.Fatalf("accepted unknown key %q", k)
		}
	}
	present := func(k string) bool { _, ok := top[k]; return ok }
	if present("run_id") != (r.RunID != nil) || present("task_id") != (r.TaskID != nil) ||
		present("pgn") != (r.PGN != nil) || present("message") != (r.Message != nil) ||
		present("spsa") != (r.SPSA != nil) || present("stats") != (r.Stats != nil) {
		t.Fatalf("presence of optional keys differs from encoding/json's: %+v", r)
	}
	var pw string
	if err := json.Unmarshal(top["password"], &pw); err != nil || pw != r.Password {
		t.Fatalf("password %q, encoding/json reads %q (%v)", r.Password, pw, err)
	}
	if r.TaskID != nil && (r.RunID == nil || *r.TaskID < 0) {
		t.Fatalf("task_id %d without run_id or negative", *r.TaskID)
	}
	if r.RunID != nil && !objectIDRE.MatchString(*r.RunID) {
		t.Fatalf("accepted run_id %q", *r.RunID)
	}

	var wi map[string]json.RawMessage
	if err := json.Unmarshal(top["worker_info"], &wi); err != nil || len(wi) != 16 {
		t.Fatalf("worker_info with %d keys accepted (%v)", len(wi), err)
	}
	for _, k := range []string{"uname", "architecture", "concurrency", "max_memory", "min_threads", "username", "version",
		"python_version", "gcc_version", "compiler", "unique_key", "modified", "worker_arch", "ARCH", "nps", "near_github_api_limit"} {
		if _, ok := wi[k]; !ok {
			t.Fatalf("worker_info without %q accepted", k)
		}
	}
	var conc json.Number
	if err := json.Unmarshal(wi["concurrency"], &conc); err != nil || conc.String() != strconv.Itoa(r.WorkerInfo.Concurrency) {
		// encoding/json keeps the number's text, so "-0" would differ; only positive ints pass here.
		t.Fatalf("concurrency %d, encoding/json reads %q (%v)", r.WorkerInfo.Concurrency, conc, err)
	}
	w := r.WorkerInfo
	if w.Concurrency <= 0 || w.MinThreads <= 0 || w.MaxMemory < 0 || w.Version < 0 {
		t.Fatalf("accepted out-of-range counts: %+v", w)
	}
	for _, v := range append(w.PythonVersion[:], w.GCCVersion[:]...) {
		if v < 0 {
			t.Fatalf("accepted a negative version number: %+v", w)
		}
	}
	if !usernameRE.MatchString(w.Username) && !legacy(w.Username) {
		t.Fatalf("accepted username %q", w.Username)
	}
	if !uniqueKeyRE.MatchString(w.UniqueKey) {
		t.Fatalf("accepted unique_key %q", w.UniqueKey)
	}
	if w.Compiler != "g++" && w.Compiler != "clang++" {
		t.Fatalf("accepted compiler %q", w.Compiler)
	}
	if w.WorkerArch != "unknown" && !slices.Contains(protocol.SupportedArches(), w.WorkerArch) {
		t.Fatalf("accepted worker_arch %q", w.WorkerArch)
	}
	if !(w.NPS >= 0) || math.IsInf(w.NPS, 0) {
		t.Fatalf("accepted nps %v", w.NPS)
	}

	if s := r.SPSA; s != nil {
		if s.Wins < 0 || s.Losses < 0 || s.Draws < 0 || s.NumGames < 0 || s.Sig < 0 || s.NumGames%2 != 0 ||
			bigSum(s.Wins, s.Losses, s.Draws).Cmp(bigSum(s.NumGames)) != 0 {
			t.Fatalf("accepted spsa %+v", *s)
		}
	}
	if s := r.Stats; s != nil {
		p := s.Pentanomial
		for _, v := range []int{s.Wins, s.Losses, s.Draws, s.Crashes, s.TimeLosses, p[0], p[1], p[2], p[3], p[4]} {
			if v < 0 {
				t.Fatalf("accepted negative stats %+v", *s)
			}
		}
		two := big.NewInt(2)
		pairs := bigSum(p[:]...)
		wl := new(big.Int).Sub(big.NewInt(int64(s.Wins)), big.NewInt(int64(s.Losses)))
		penta := new(big.Int).Mul(two, big.NewInt(int64(p[4])))
		penta.Add(penta, big.NewInt(int64(p[3]))).Sub(penta, big.NewInt(int64(p[1])))
		penta.Sub(penta, new(big.Int).Mul(two, big.NewInt(int64(p[0]))))
		most := bigSum(p[3], p[2], p[2], p[1])
		d := big.NewInt(int64(s.Draws))
		if bigSum(s.Wins, s.Losses, s.Draws).Cmp(pairs.Mul(pairs, two)) != 0 || wl.Cmp(penta) != 0 ||
			d.Cmp(most) > 0 || d.Cmp(bigSum(p[3], p[1])) < 0 {
			t.Fatalf("accepted stats that break valid_results: %+v", *s)
		}
	}
}

func bigSum(xs ...int) *big.Int {
	s := new(big.Int)
	for _, x := range xs {
		s.Add(s, big.NewInt(int64(x)))
	}
	return s
}

// checkIndexedAgrees holds what the server does with a call's body (ParseBodyInto, Access, then
// RequestInto from the members the check found, into a buffer that held another call) to what
// DecodeAccess and DecodeRequest say of it: the same credentials, the same request, the same
// errors. RequestInto is tried both after Access and without it.
func checkIndexedAgrees(t *testing.T, body []byte) {
	t.Helper()
	wantUser, wantPassword, wantAccessErr := protocol.DecodeAccess(body)
	want, wantErr := protocol.DecodeRequest(body, legacy)
	for _, access := range []bool{true, false} {
		buf := new(protocol.RequestBuffer)
		// The buffer held another call's body and request, as a pooled one does.
		other, err := protocol.ParseBodyInto(buf, []byte(spsaUpdateBody))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := other.Access(); err != nil {
			t.Fatal(err)
		}
		if _, err := other.RequestInto(buf, legacy); err != nil {
			t.Fatal(err)
		}

		p, err := protocol.ParseBodyInto(buf, body)
		if err != nil {
			if !errors.Is(err, protocol.ErrNotJSON) || !errors.Is(wantErr, protocol.ErrNotJSON) {
				t.Fatalf("ParseBodyInto: %v, DecodeRequest: %v", err, wantErr)
			}
			continue
		}
		if access {
			user, password, err := p.Access()
			if fmt.Sprint(err) != fmt.Sprint(wantAccessErr) || user != wantUser || password != wantPassword {
				t.Fatalf("indexed Access: %q %q %v, want %q %q %v", user, password, err, wantUser, wantPassword, wantAccessErr)
			}
			if err != nil {
				continue // the server stops here
			}
		}
		got, err := p.RequestInto(buf, legacy)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("indexed RequestInto (after Access: %v): error %v, want %v", access, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("indexed RequestInto (after Access: %v):\n got %+v\nwant %+v", access, got, want)
		}
	}
}
