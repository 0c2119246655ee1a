package demo

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
)

func TestMain(m *testing.M) { rundbtest.Main(m) }

// The demo's accounts are what a simulation needs: a submitter, an approver who is not the
// submitter, and a workers' account allowed machineLimit machines, each with a password that
// logs in.
func TestCreateUsers(t *testing.T) {
	db := rundbtest.Open(t)
	ctx := context.Background()
	u, err := CreateUsers(ctx, db, 42)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{u.Submitter.Name, u.Approver.Name, u.Workers.Name}
	if names[0] == names[1] || names[1] == names[2] || names[0] == names[2] {
		t.Errorf("the accounts share a name: %v", names)
	}
	for _, a := range []Account{u.Submitter, u.Approver, u.Workers} {
		if a.Password == "" {
			t.Errorf("%s has no password", a.Name)
		}
		if _, err := db.Users.Authenticate(ctx, a.Name, a.Password); err != nil {
			t.Errorf("%s cannot log in with its password: %v", a.Name, err)
		}
	}
	approver, err := db.Users.Get(ctx, u.Approver.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(approver.Groups, rundb.ApproversGroup) {
		t.Errorf("the approver's groups are %v, want %s among them", approver.Groups, rundb.ApproversGroup)
	}
	submitter, err := db.Users.Get(ctx, u.Submitter.Name)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(submitter.Groups, rundb.ApproversGroup) {
		t.Errorf("the submitter is an approver: %v", submitter.Groups)
	}
	workers, err := db.Users.Get(ctx, u.Workers.Name)
	if err != nil {
		t.Fatal(err)
	}
	if workers.MachineLimit != 42 {
		t.Errorf("the workers' machine limit is %d, want 42", workers.MachineLimit)
	}
}

// RunRequest is a test the scheduler accepts, as a fixed-games run (the bench's) and as an
// SPRT (the demo's).
func TestRunRequestIsAValidTest(t *testing.T) {
	games := RunRequest("bench run 1")
	games.NumGames = 400000
	sprt := RunRequest("Shoal demo")
	sprt.SPRT = &protocol.SPRTRequest{Elo0: new(0.0), Elo1: new(2.0)}
	for name, req := range map[string]protocol.RunRequest{"fixed games": games, "SPRT": sprt} {
		if _, err := scheduler.BuildRun(req, "alice", time.Now()); err != nil {
			t.Errorf("%s: the scheduler refuses the demo's request: %v", name, err)
		}
	}
}

// fakeSubmitAPI answers create_run and approve_run and remembers who called each.
type fakeSubmitAPI struct {
	mu       sync.Mutex
	callers  map[string]string // path -> username
	runID    string
	approved bool
}

func (f *fakeSubmitAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Username string `json:"username"`
		Password string `json:"password"`
		RunID    string `json:"run_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.callers[r.URL.Path] = body.Username + ":" + body.Password
	f.mu.Unlock()
	switch r.URL.Path {
	case "/api/create_run":
		_ = json.NewEncoder(w).Encode(map[string]any{"run_id": f.runID, "duration": 0.001})
	case "/api/approve_run":
		if body.RunID != f.runID {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "/api/approve_run: no such run"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"approved": f.approved, "duration": 0.001})
	default:
		http.NotFound(w, r)
	}
}

func TestSubmitRun(t *testing.T) {
	u := Users{Submitter: Account{"alice", "a-pw"}, Approver: Account{"bob", "b-pw"}, Workers: Account{"fleet", "f-pw"}}
	tests := []struct {
		name     string
		runID    string
		approved bool
		wantErr  string
	}{
		{"the submitter creates, the approver approves", "run1", true, ""},
		{"a reply without a run id is an error", "", true, "the reply has no run_id"},
		{"an approval not confirmed is an error", "run1", false, "approve run run1: not confirmed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSubmitAPI{callers: map[string]string{}, runID: tc.runID, approved: tc.approved}
			srv := httptest.NewServer(f)
			defer srv.Close()
			id, err := SubmitRun(context.Background(), srv.URL, u, RunRequest("test"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("SubmitRun: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || id != tc.runID {
				t.Fatalf("SubmitRun: %q, %v; want %q", id, err, tc.runID)
			}
			want := map[string]string{"/api/create_run": "alice:a-pw", "/api/approve_run": "bob:b-pw"}
			for path, who := range want {
				if f.callers[path] != who {
					t.Errorf("%s called as %q, want %q", path, f.callers[path], who)
				}
			}
		})
	}
}

func TestPrintVerdict(t *testing.T) {
	tests := []struct{ state, want string }{
		{"accepted", "ACCEPTED"},
		{"rejected", "REJECTED"},
		{"", "NOT DECIDED (out of time)"},
	}
	for _, tc := range tests {
		var e eloReply
		e.Args.SPRT.State = tc.state
		e.Results.Wins, e.Results.Losses, e.Results.Draws = 3, 2, 5
		var out bytes.Buffer
		if got := printVerdict(&out, "r1", &e, "out of time", 12); got != tc.want {
			t.Errorf("state %q: verdict %q, want %q", tc.state, got, tc.want)
		}
		if !strings.Contains(out.String(), "Run r1: "+tc.want+" after 12 s") || !strings.Contains(out.String(), "Games 10: W 3, L 2, D 5") {
			t.Errorf("state %q: the verdict reads\n%s", tc.state, out.String())
		}
	}
}

func TestGetElo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/get_elo/r1" {
			http.Error(w, "no such run", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(`{"finished": true, "results": {"wins": 7, "losses": 3, "draws": 10, "pentanomial": [0, 1, 2, 3, 4]},
			"args": {"sprt": {"state": "accepted", "llr": 2.95, "lower_bound": -2.94, "upper_bound": 2.94, "elo0": 0, "elo1": 2}},
			"elo": {"elo": 4.5, "ci": [1.5, 7.5], "LOS": 0.99}}`))
	}))
	defer srv.Close()
	e, err := getElo(context.Background(), srv.URL, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !e.Finished || e.Results.Wins != 7 || e.Args.SPRT.State != "accepted" || e.Args.SPRT.LLR != 2.95 || e.Elo.CI[1] != 7.5 || e.Elo.LOS != 0.99 {
		t.Errorf("getElo read %+v", e)
	}
	if _, err := getElo(context.Background(), srv.URL, "nope"); err == nil || !strings.Contains(err.Error(), "get_elo nope: 404") {
		t.Errorf("getElo of a missing run: %v, want the 404 and the server's text", err)
	}
}

// pgnGame is a short legal game (the fool's mate, Black wins) with the tags the worker writes.
func pgnGame(white, black, result, moves string) string {
	return `[Event "shoal test"]
[White "` + white + `"]
[Black "` + black + `"]
[Result "` + result + `"]
[TimeControl "0.4+0.004"]
[RunTimeControl "10+0.1"]

` + moves + " " + result + "\n\n"
}

func TestCheckRunPGNs(t *testing.T) {
	mate := "1. f3 e5 2. g4 Qh4#"
	tests := []struct {
		name    string
		games   []string
		want    pgnTally
		wantErr string
	}{
		{
			name: "results are counted for the tested engine on either side",
			games: []string{
				pgnGame("demo-patch", "master", "0-1", mate), // a loss
				pgnGame("master", "demo-patch", "0-1", mate), // a win
				pgnGame("demo-patch", "master", "1/2-1/2", "1. e4 e5"),
			},
			want: pgnTally{games: 3, wins: 1, losses: 1, draws: 1,
				tcs: map[string]int{"0.4+0.004": 3}, runTCs: map[string]int{"10+0.1": 3}},
		},
		{
			name:    "an illegal move is an error naming the game",
			games:   []string{pgnGame("demo-patch", "master", "1/2-1/2", "1. e4 e5"), pgnGame("demo-patch", "master", "1-0", "1. e5")},
			wantErr: "game 2",
		},
		{
			name:    "a game without a result is an error",
			games:   []string{pgnGame("demo-patch", "master", "*", "1. e4")},
			wantErr: "game 1 has no result",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/run_pgns/r1.pgn.gz" {
					http.NotFound(w, r)
					return
				}
				zw := gzip.NewWriter(w)
				_, _ = zw.Write([]byte(strings.Join(tc.games, "")))
				_ = zw.Close()
			}))
			defer srv.Close()
			got, err := checkRunPGNs(context.Background(), srv.URL, "r1", "demo-patch")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("checkRunPGNs: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.games != tc.want.games || got.wins != tc.want.wins || got.losses != tc.want.losses || got.draws != tc.want.draws ||
				!maps.Equal(got.tcs, tc.want.tcs) || !maps.Equal(got.runTCs, tc.want.runTCs) {
				t.Errorf("tally %+v, want %+v", got, tc.want)
			}
		})
	}
}
