package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/servertest"
)

// apiFrom sends a JSON body to the fleet's handler from address ip, returning the status, the
// Retry-After header and the decoded reply.
func (f *fleet) apiFrom(ip, path string, body any) (int, string, map[string]any) {
	f.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = ip + ":5555"
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		f.t.Fatalf("%s: reply is not a JSON object: %d %s", path, w.Code, w.Body)
	}
	if _, ok := out["duration"].(float64); !ok {
		f.t.Errorf("%s: reply without a duration: %s", path, w.Body)
	}
	return w.Code, w.Header().Get("Retry-After"), out
}

func versionCall(password string) map[string]any {
	return map[string]any{"password": password, "worker_info": map[string]any{"username": "wrk"}}
}

var apiLimitedText = regexp.MustCompile(`^(/api/[a-z_]+): too many failed logins from this address; retry in (\d+) s$`)

// checkAPILimited asserts that a reply is the API's 429: the JSON error shape naming the path
// and the wait, which Retry-After repeats.
func checkAPILimited(t *testing.T, path string, code int, retry string, out map[string]any) {
	t.Helper()
	msg, _ := out["error"].(string)
	m := apiLimitedText.FindStringSubmatch(msg)
	if code != http.StatusTooManyRequests || m == nil || m[1] != path {
		t.Errorf("%s: %d %v, want 429 %q", path, code, out, api.APITooManyLoginsText)
		return
	}
	if secs, err := strconv.Atoi(retry); err != nil || secs < 1 || strconv.Itoa(secs) != m[2] {
		t.Errorf("%s: Retry-After %q, message %q", path, retry, msg)
	}
}

func TestAuthLimitWorkerAPI(t *testing.T) {
	f := newFleet(t)
	const a, b = "203.0.113.5", "198.51.100.7"

	// Right passwords cost nothing, however many.
	for i := range 2 * guard.APILoginPerIPBurst {
		if code, _, out := f.apiFrom(a, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK {
			t.Fatalf("good call %d: %d %v", i+1, code, out)
		}
	}
	for i := range guard.APILoginPerIPBurst {
		if code, _, out := f.apiFrom(a, "/api/request_version", versionCall(fmt.Sprint("guess-", i))); code != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d %v, want 401", i+1, code, out)
		}
	}
	code, retry, out := f.apiFrom(a, "/api/request_version", versionCall("guess-x"))
	checkAPILimited(t, "/api/request_version", code, retry, out)

	// While the address is limited, credentials that just succeeded still work (the fleet
	// behind that address keeps playing), but any other login from it is refused: the limit
	// cannot know a new password is right without checking it, and checking would answer
	// the guess.
	if code, _, out := f.apiFrom(a, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK {
		t.Errorf("known-good credentials from the limited address: %d %v, want 200", code, out)
	}
	code, retry, out = f.apiFrom(a, "/api/create_run", map[string]any{"username": "wrk", "password": "not-yet-seen", "run": map[string]any{}})
	checkAPILimited(t, "/api/create_run", code, retry, out)
	code, retry, out = f.apiFrom(a, "/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": map[string]any{}})
	checkAPILimited(t, "/api/create_run", code, retry, out)
	code, retry, out = f.apiFrom(a, "/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": strings.Repeat("a", 24)})
	checkAPILimited(t, "/api/approve_run", code, retry, out)

	// Another address is not affected.
	if code, _, out := f.apiFrom(b, "/api/request_version", versionCall("wrkpw")); code != http.StatusOK || out["version"] == nil {
		t.Errorf("a right password from another address: %d %v", code, out)
	}
	// A malformed body is not a login and costs nothing.
	if code, _, _ := f.apiFrom(b, "/api/request_version", map[string]any{"worker_info": map[string]any{"username": "wrk"}}); code != http.StatusBadRequest {
		t.Errorf("no password: %d, want 400", code)
	}
}

func TestAuthLimitWorkerAPIParallelGuesses(t *testing.T) {
	f := newFleet(t)
	n := 3 * guard.APILoginPerIPBurst
	// A fleet starting up behind one address: every right password gets through, however
	// many are checked at once (the checks over the burst wait for those in flight).
	good := servertest.Parallel(n, func(int) int {
		code, _, _ := f.apiFrom("203.0.113.9", "/api/request_version", versionCall("wrkpw"))
		return code
	})
	if good[http.StatusOK] != n {
		t.Errorf("%d parallel right passwords: statuses %v, want all 200", n, good)
	}
	codes := servertest.Parallel(n, func(i int) int {
		code, _, _ := f.apiFrom("203.0.113.9", "/api/request_version", versionCall(fmt.Sprint("guess-", i)))
		return code
	})
	if codes[http.StatusUnauthorized] != guard.APILoginPerIPBurst || codes[http.StatusTooManyRequests] != n-guard.APILoginPerIPBurst {
		t.Errorf("%d parallel guesses: statuses %v, want %d checked (401) and the rest 429", n, codes, guard.APILoginPerIPBurst)
	}
}

func TestAuthLimitSubmitAPICounts(t *testing.T) {
	f := newFleet(t)
	const ip = "203.0.113.77"
	half := guard.APILoginPerIPBurst / 2
	for i := range half {
		code, _, out := f.apiFrom(ip, "/api/create_run", map[string]any{"username": "alice", "password": "nope", "run": map[string]any{}})
		if code != http.StatusUnauthorized {
			t.Fatalf("create_run with a wrong password %d: %d %v", i+1, code, out)
		}
	}
	// Failures after a right password (here: not an approver; the run does not exist) do not
	// count; failed logins do, on every API path alike.
	for range guard.APILoginPerIPBurst {
		code, _, out := f.apiFrom(ip, "/api/approve_run", map[string]any{"username": "alice", "password": "alicepw", "run_id": strings.Repeat("a", 24)})
		if code != http.StatusForbidden {
			t.Fatalf("approve_run by a non-approver: %d %v, want 403", code, out)
		}
	}
	for i := range guard.APILoginPerIPBurst - half {
		code, _, out := f.apiFrom(ip, "/api/approve_run", map[string]any{"username": "bob", "password": "nope", "run_id": strings.Repeat("a", 24)})
		if code != http.StatusUnauthorized {
			t.Fatalf("approve_run with a wrong password %d: %d %v", i+1, code, out)
		}
	}
	code, retry, out := f.apiFrom(ip, "/api/request_version", versionCall("guess"))
	checkAPILimited(t, "/api/request_version", code, retry, out)
}
