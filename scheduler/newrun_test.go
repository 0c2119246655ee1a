package scheduler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

const (
	testShaBase = "0123456789abcdef0123456789abcdef01234567"
	testShaNew  = "89abcdef0123456789abcdef0123456789abcdef"
	testNetA    = "nn-0123456789ab.nnue"
	testNetB    = "nn-ba9876543210.nnue"
)

func refTo[T any](v T) *T { return &v }

// fixedGamesRequest is a fixed-games request that BuildRun accepts; cases change one field.
func fixedGamesRequest() protocol.RunRequest {
	return protocol.RunRequest{
		BaseTag: "master", NewTag: "patch", ResolvedBase: testShaBase, ResolvedNew: testShaNew,
		TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16",
		BaseSignature: "2050811", NewSignature: "2061234",
		TestsRepo: "https://github.com/alice/Stockfish", Info: "try a patch",
		NumGames: 20000,
	}
}

func sprtRunRequest(tc string, threads int) protocol.RunRequest {
	req := fixedGamesRequest()
	req.NumGames = 0
	req.TC = tc
	req.Threads = refTo(threads)
	req.SPRT = &protocol.SPRTRequest{Elo0: refTo(0.0), Elo1: refTo(2.0)}
	return req
}

func spsaRunRequest() protocol.RunRequest {
	req := fixedGamesRequest()
	req.NumGames = 0
	req.BaseSignature = ""
	req.SPSA = &protocol.SPSARequest{RawParams: "Tempo,20,0,50,2,0.002\nOther,-5.5,-10,10,0.5,0.01\n", NumGames: 20000}
	return req
}

var submitTime = time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.FixedZone("CET", 3600))

func TestBuildRunRejectsEachInvalidField(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(r *protocol.RunRequest)
		field string
		want  string // part of the message
	}{
		{"empty base tag", func(r *protocol.RunRequest) { r.BaseTag = "" }, "base_tag", "missing"},
		{"rescheduled from a non-id", func(r *protocol.RunRequest) { r.RescheduledFrom = "yesterday" }, "rescheduled_from", "not a run id"},
		{"blank new tag", func(r *protocol.RunRequest) { r.NewTag = "  " }, "new_tag", "missing"},
		{"short base sha", func(r *protocol.RunRequest) { r.ResolvedBase = "abc123" }, "resolved_base", "not a commit SHA"},
		{"upper-case new sha", func(r *protocol.RunRequest) { r.ResolvedNew = strings.ToUpper(testShaNew) }, "resolved_new", "not a commit SHA"},
		{"missing tc", func(r *protocol.RunRequest) { r.TC = "" }, "tc", "missing"},
		{"tc with letters", func(r *protocol.RunRequest) { r.TC = "10s+0.1" }, "tc", "not a time control"},
		{"tc with two increments", func(r *protocol.RunRequest) { r.TC = "10+0.1+1" }, "tc", "not a time control"},
		{"tc whose games take no time", func(r *protocol.RunRequest) { r.TC = "0" }, "tc", "no time"},
		{"moves of zero", func(r *protocol.RunRequest) { r.TC = "0/10" }, "tc", "not a time control"},
		{"bad new tc", func(r *protocol.RunRequest) { r.NewTC = "fast" }, "new_tc", "not a time control"},
		{"book without extension", func(r *protocol.RunRequest) { r.Book = "UHO_Lichess" }, "book", ".epd or .pgn"},
		{"book with a path", func(r *protocol.RunRequest) { r.Book = "../secret.epd" }, "book", ".epd or .pgn"},
		{"book that is only an extension", func(r *protocol.RunRequest) { r.Book = ".pgn" }, "book", ".epd or .pgn"},
		{"book depth zero", func(r *protocol.RunRequest) { r.BookDepth = "0" }, "book_depth", "positive whole number"},
		{"book depth not a number", func(r *protocol.RunRequest) { r.BookDepth = "eight" }, "book_depth", "positive whole number"},
		{"zero threads", func(r *protocol.RunRequest) { r.Threads = refTo(0) }, "threads", ">= 1"},
		{"negative threads", func(r *protocol.RunRequest) { r.Threads = refTo(-4) }, "threads", ">= 1"},
		{"empty base options", func(r *protocol.RunRequest) { r.BaseOptions = " " }, "base_options", "missing"},
		{"option without value", func(r *protocol.RunRequest) { r.NewOptions = "Hash=16 Ponder" }, "new_options", "name=value"},
		{"option with two equals", func(r *protocol.RunRequest) { r.NewOptions = "Hash=16=2" }, "new_options", "name=value"},
		{"non-ASCII option", func(r *protocol.RunRequest) { r.BaseOptions = "Hash=16 Café=1" }, "base_options", "ASCII"},
		{"missing base signature", func(r *protocol.RunRequest) { r.BaseSignature = "" }, "base_signature", "missing"},
		{"signature with leading zero", func(r *protocol.RunRequest) { r.NewSignature = "0123" }, "new_signature", "bench node count"},
		{"signature with letters", func(r *protocol.RunRequest) { r.NewSignature = "12ab" }, "new_signature", "bench node count"},
		{"bad net name", func(r *protocol.RunRequest) { r.BaseNets = []string{"nn-xyz.nnue"} }, "base_nets", "not a network name"},
		{"net name with any character for the dot", func(r *protocol.RunRequest) { r.NewNets = []string{"nn-0123456789abxnnue"} }, "new_nets", "not a network name"},
		{"duplicate net", func(r *protocol.RunRequest) { r.NewNets = []string{testNetA, testNetA} }, "new_nets", "twice"},
		{"repo without a path", func(r *protocol.RunRequest) { r.TestsRepo = "https://github.com/" }, "tests_repo", "not a repository URL"},
		{"plain http repo", func(r *protocol.RunRequest) { r.TestsRepo = "http://github.com/alice/Stockfish" }, "tests_repo", "not a repository URL"},
		{"repo with a password", func(r *protocol.RunRequest) { r.TestsRepo = "https://alice:pw@github.com/alice/Stockfish" }, "tests_repo", "not a repository URL"},
		{"ssh repo", func(r *protocol.RunRequest) { r.TestsRepo = "git@github.com:alice/Stockfish" }, "tests_repo", "not a repository URL"},
		{"relative path", func(r *protocol.RunRequest) { r.TestsRepo = "stockfish.git" }, "tests_repo", "not a repository URL"},
		{"unclean path", func(r *protocol.RunRequest) { r.TestsRepo = "/srv/../etc/stockfish.git" }, "tests_repo", "not a clean absolute path"},
		{"missing info", func(r *protocol.RunRequest) { r.Info = "\n" }, "info", "missing"},
		{"negative throughput", func(r *protocol.RunRequest) { r.Throughput = refTo(-1) }, "throughput", ">= 0"},
		{"arch filter that does not compile", func(r *protocol.RunRequest) { r.ArchFilter = "x86-64-(avx2" }, "arch_filter", "invalid regular expression"},
		{"arch filter matching nothing", func(r *protocol.RunRequest) { r.ArchFilter = "^sparc" }, "arch_filter", "matches no worker architecture"},
		{"unknown compiler", func(r *protocol.RunRequest) { r.Compiler = "icc" }, "compiler", "not one of"},
		{"no stop rule", func(r *protocol.RunRequest) { r.NumGames = 0 }, "num_games", "missing"},
		{"negative games", func(r *protocol.RunRequest) { r.NumGames = -2000 }, "num_games", "negative"},
		{"too few games", func(r *protocol.RunRequest) { r.NumGames = 500 }, "num_games", ">= 1000"},
		{"games not a multiple of 1000", func(r *protocol.RunRequest) { r.NumGames = 1500 }, "num_games", "multiple of 1000"},
		{"too many games", func(r *protocol.RunRequest) { r.NumGames = 3201000 }, "num_games", "<= 3200000"},
		{"num_games with sprt", func(r *protocol.RunRequest) { r.SPRT = &protocol.SPRTRequest{Elo0: refTo(0.0), Elo1: refTo(2.0)} }, "num_games", "fixed-games"},
		{"num_games with spsa", func(r *protocol.RunRequest) { r.SPSA = spsaRunRequest().SPSA }, "num_games", "spsa.num_games"},
		{"sprt and spsa", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPSA = spsaRunRequest().SPSA }, "spsa", "not both"},
		{"sprt without elo0", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.Elo0 = nil }, "sprt.elo0", "missing"},
		{"sprt without elo1", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.Elo1 = nil }, "sprt.elo1", "missing"},
		{"infinite elo0", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.Elo0 = refTo(math.Inf(-1)) }, "sprt.elo0", "finite"},
		{"NaN elo1", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.Elo1 = refTo(math.NaN()) }, "sprt.elo1", "finite"},
		{"bounds in the wrong order", func(r *protocol.RunRequest) {
			*r = sprtRunRequest("10+0.1", 1)
			r.SPRT.Elo0, r.SPRT.Elo1 = refTo(2.0), refTo(0.0)
		}, "sprt.elo1", "greater than elo0"},
		{"equal bounds", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.Elo1 = refTo(0.0) }, "sprt.elo1", "greater than elo0"},
		{"logistic model", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.EloModel = "logistic" }, "sprt.elo_model", "no longer accepted"},
		{"BayesElo model", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.EloModel = "BayesElo" }, "sprt.elo_model", "no longer accepted"},
		{"unknown model", func(r *protocol.RunRequest) { *r = sprtRunRequest("10+0.1", 1); r.SPRT.EloModel = "Elo" }, "sprt.elo_model", "unknown Elo model"},
		{"spsa games too few", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.NumGames = 0 }, "spsa.num_games", ">= 1000"},
		{"spsa games not a multiple", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.NumGames = 20500 }, "spsa.num_games", "multiple of 1000"},
		{"spsa games too many", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.NumGames = 4000000 }, "spsa.num_games", "<= 3200000"},
		{"spsa A and A_ratio", func(r *protocol.RunRequest) {
			*r = spsaRunRequest()
			r.SPSA.A, r.SPSA.ARatio = refTo(100.0), refTo(0.1)
		}, "spsa.A", "not both"},
		{"spsa fractional A", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.A = refTo(0.1) }, "spsa.A", "A_ratio"},
		{"spsa negative A", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.A = refTo(-5.0) }, "spsa.A", ">= 0"},
		{"spsa negative A ratio", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.ARatio = refTo(-0.1) }, "spsa.A_ratio", ">= 0"},
		{"spsa infinite alpha", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.Alpha = refTo(math.Inf(1)) }, "spsa.alpha", "finite"},
		{"spsa negative gamma", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.Gamma = refTo(-0.1) }, "spsa.gamma", ">= 0"},
		{"spsa without params", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = "\n \n" }, "spsa.raw_params", "missing"},
		{"spsa line with five fields", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = "Tempo,20,0,50,2" }, "spsa.raw_params", "line 1"},
		{"spsa c_end of zero", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = "A,1,0,2,1,0\nB,1,0,2,0,0.1" }, "spsa.raw_params", "line 2"},
		{"spsa negative r_end", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = "A,1,0,2,1,-0.1" }, "spsa.raw_params", "r_end"},
		{"spsa start not a number", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = "A,x,0,2,1,0.1" }, "spsa.raw_params", "start"},
		{"spsa parameter without a name", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.SPSA.RawParams = ",1,0,2,1,0.1" }, "spsa.raw_params", "no name"},
		{"spsa without new signature", func(r *protocol.RunRequest) { *r = spsaRunRequest(); r.NewSignature = "" }, "new_signature", "missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := fixedGamesRequest()
			c.edit(&req)
			run, err := BuildRun(req, "alice", submitTime)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("BuildRun = %v, %v; want a *FieldError for %s", run, err, c.field)
			}
			if fe.Field != c.field || !strings.Contains(fe.Message, c.want) {
				t.Errorf("error = %q; want field %q with %q", err, c.field, c.want)
			}
			if !strings.HasPrefix(err.Error(), c.field+": ") {
				t.Errorf("Error() = %q does not start with the field", err)
			}
		})
	}
}

func TestBuildRunWithoutUsername(t *testing.T) {
	var fe *FieldError
	if _, err := BuildRun(fixedGamesRequest(), "", submitTime); !errors.As(err, &fe) || fe.Field != "username" {
		t.Errorf("BuildRun without a user = %v", err)
	}
}

func TestBuildRunFixedGamesDocument(t *testing.T) {
	req := fixedGamesRequest()
	req.TestsRepo += "/"
	req.BaseOptions = "  Hash=16   Threads=1 "
	req.BaseNets = []string{testNetA}
	req.ArchFilter = "avx2"
	req.Compiler = "clang++"
	req.Priority = -1
	req.Throughput = refTo(50)
	req.AutoPurge = true
	req.Adjudication = refTo(false)
	r, err := BuildRun(req, "alice", submitTime)
	if err != nil {
		t.Fatal(err)
	}
	wantTime := time.Date(2026, 3, 1, 11, 30, 45, 123000000, time.UTC)
	if r.ID.IsZero() || r.Version != 24 || !r.StartTime.Equal(wantTime) || r.StartTime.Location() != time.UTC ||
		!r.LastUpdated.Equal(wantTime) || r.TCBase != 10 {
		t.Errorf("header: id %v version %d start %v last %v tc_base %v", r.ID, r.Version, r.StartTime, r.LastUpdated, r.TCBase)
	}
	if r.Approved || r.Approver != "" || r.Finished || r.Deleted || r.Failed || r.Failures != 0 || r.IsGreen || r.IsYellow {
		t.Errorf("flags of a new run: %+v", r)
	}
	if r.Workers != 0 || r.Cores != 0 || r.CommittedGames != 0 || r.TotalGames != 0 || r.NPS != 0 || r.GamesPerMinute != 0 {
		t.Errorf("aggregates of a new run: %+v", r)
	}
	if r.Results.Games() != 0 || len(r.Results.Pentanomial) != 5 {
		t.Errorf("results = %+v", r.Results)
	}
	if r.Tasks == nil || len(r.Tasks) != 0 || r.BadTasks == nil || len(r.BadTasks) != 0 {
		t.Errorf("tasks %v bad_tasks %v: want empty, non-nil", r.Tasks, r.BadTasks)
	}
	a := r.Args
	want := rundb.RunArgs{
		BaseTag: "master", NewTag: "patch", ResolvedBase: testShaBase, ResolvedNew: testShaNew,
		BaseNets: []string{testNetA}, NewNets: []string{}, NumGames: 20000, TC: "10+0.1", NewTC: "10+0.1",
		Threads: 1, Book: "UHO_Lichess_4852_v1.epd", BookDepth: "8",
		BaseOptions: "Hash=16 Threads=1", NewOptions: "Hash=16", Info: "try a patch", Username: "alice",
		BaseSignature: "2050811", NewSignature: "2061234", TestsRepo: "https://github.com/alice/Stockfish",
		Throughput: 50, ITP: 100, Priority: -1, AutoPurge: true, Adjudication: false,
		ArchFilter: "avx2", Compiler: "clang++",
	}
	if a.NewNets == nil {
		t.Error("new_nets is nil; fishtest stores an empty list")
	}
	if a.BaseTag != want.BaseTag || a.NewTag != want.NewTag || a.ResolvedBase != want.ResolvedBase ||
		a.ResolvedNew != want.ResolvedNew || strings.Join(a.BaseNets, ",") != testNetA || len(a.NewNets) != 0 ||
		a.NumGames != want.NumGames || a.TC != want.TC || a.NewTC != want.NewTC || a.Threads != want.Threads ||
		a.Book != want.Book || a.BookDepth != want.BookDepth || a.BaseOptions != want.BaseOptions ||
		a.NewOptions != want.NewOptions || a.Info != want.Info || a.Username != want.Username ||
		a.BaseSignature != want.BaseSignature || a.NewSignature != want.NewSignature ||
		a.TestsRepo != want.TestsRepo || a.Throughput != want.Throughput || a.ITP != want.ITP ||
		a.Priority != want.Priority || a.AutoPurge != want.AutoPurge || a.Adjudication != want.Adjudication ||
		a.ArchFilter != want.ArchFilter || a.Compiler != want.Compiler || a.SPRT != nil || a.SPSA != nil {
		t.Errorf("args =\n%+v\nwant\n%+v", a, want)
	}

	// Defaults: throughput 100, priority 0, adjudication on, auto-purge off.
	r, err = BuildRun(fixedGamesRequest(), "alice", submitTime)
	if err != nil {
		t.Fatal(err)
	}
	if a := r.Args; a.Throughput != 100 || a.Priority != 0 || !a.Adjudication || a.AutoPurge || a.ArchFilter != "" || a.Compiler != "" {
		t.Errorf("defaults: %+v", a)
	}
	// A second build of the same request gets its own ID.
	r2, _ := BuildRun(fixedGamesRequest(), "alice", submitTime)
	if r2.ID == r.ID {
		t.Error("two runs share an ID")
	}
}

func TestBuildRunTimeOdds(t *testing.T) {
	req := fixedGamesRequest()
	req.TC, req.NewTC = "40/60+0.6", "40/30+0.3"
	r, err := BuildRun(req, "alice", submitTime)
	if err != nil {
		t.Fatal(err)
	}
	// tc_base is the leading number of tc, as fishtest's regex takes it.
	if r.Args.TC != "40/60+0.6" || r.Args.NewTC != "40/30+0.3" || r.TCBase != 40 {
		t.Errorf("tc %q new_tc %q tc_base %v", r.Args.TC, r.Args.NewTC, r.TCBase)
	}
}

func TestBuildRunSPRT(t *testing.T) {
	cases := []struct {
		tc        string
		threads   int
		batch     int
		ltcPrefix bool
	}{
		{"10+0.1", 1, 16, false},
		{"60+0.6", 1, 3, true},
		{"5+0.05", 8, 4, false}, // SMP STC: ratio exactly 4, not LTC
		{"20+0.2", 8, 1, true},
		{"180+1.8", 1, 1, true},
	}
	for _, c := range cases {
		t.Run(c.tc, func(t *testing.T) {
			r, err := BuildRun(sprtRunRequest(c.tc, c.threads), "alice", submitTime)
			if err != nil {
				t.Fatal(err)
			}
			s := r.Args.SPRT
			if s == nil {
				t.Fatal("no sprt")
			}
			if s.BatchSize != c.batch {
				t.Errorf("batch_size = %d, want %d", s.BatchSize, c.batch)
			}
			if s.Alpha != 0.05 || s.Beta != 0.05 || s.Elo0 != 0 || s.Elo1 != 2 || s.EloModel != "normalized" ||
				s.State != "" || s.LLR != 0 || math.Abs(s.LowerBound+2.9444389791664403) > 1e-12 ||
				math.Abs(s.UpperBound-2.9444389791664403) > 1e-12 || s.LostSamples != nil || s.IllegalUpdate != nil {
				t.Errorf("sprt = %+v", s)
			}
			if s.Overshoot == nil || *s.Overshoot != (rundb.Overshoot{}) {
				t.Errorf("overshoot = %+v, want all zero", s.Overshoot)
			}
			if r.Args.NumGames != 800000 {
				t.Errorf("num_games = %d, want 800000", r.Args.NumGames)
			}
			if got := strings.HasPrefix(r.Args.Info, "LTC: "); got != c.ltcPrefix {
				t.Errorf("info = %q, LTC prefix %v want %v", r.Args.Info, got, c.ltcPrefix)
			}
		})
	}
}

func TestBuildRunSPSA(t *testing.T) {
	req := spsaRunRequest()
	req.BaseSignature = "999999" // an SPSA run's base is its new binary
	r, err := BuildRun(req, "alice", submitTime)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Args.SPSA
	if s == nil || r.Args.SPRT != nil {
		t.Fatalf("args = %+v", r.Args)
	}
	if r.Args.NumGames != 20000 || r.Args.BaseSignature != "2061234" || r.Args.NewSignature != "2061234" {
		t.Errorf("num_games %d base_signature %q new_signature %q", r.Args.NumGames, r.Args.BaseSignature, r.Args.NewSignature)
	}
	if s.Algorithm != "classic" || s.A != 1000 || s.Alpha != 0.602 || s.Gamma != 0.101 || s.Iter != 0 ||
		s.NumIter != 10000 || s.RawParams != req.SPSA.RawParams || s.ParamHistory != nil {
		t.Errorf("spsa = %+v", s)
	}
	// Values computed with fishtest's formulas in Python.
	want := []rundb.SPSAParam{
		{Name: "Tempo", Start: 20, Min: 0, Max: 50, CEnd: 2, REnd: 0.002,
			C: 5.070257260995816, AEnd: 0.008, A: 2.1677459497676126, Theta: 20},
		{Name: "Other", Start: -5.5, Min: -10, Max: 10, CEnd: 0.5, REnd: 0.01,
			C: 1.267564315248954, AEnd: 0.0025, A: 0.677420609302379, Theta: -5.5},
	}
	if len(s.Params) != len(want) {
		t.Fatalf("params = %+v", s.Params)
	}
	for i, p := range s.Params {
		w := want[i]
		if p.Name != w.Name || p.Start != w.Start || p.Min != w.Min || p.Max != w.Max || p.CEnd != w.CEnd ||
			p.REnd != w.REnd || !closeTo(p.C, w.C) || !closeTo(p.AEnd, w.AEnd) || !closeTo(p.A, w.A) || p.Theta != w.Theta {
			t.Errorf("param %d = %+v\nwant %+v", i, p, w)
		}
	}

	// A given as iterations.
	req = spsaRunRequest()
	req.SPSA.A = refTo(300.0)
	req.SPSA.RawParams = "Tempo,20,0,50,2,0.002"
	r, err = BuildRun(req, "alice", submitTime)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Args.SPSA; s.A != 300 || !closeTo(s.Params[0].A, 2.0836174995795345) {
		t.Errorf("with A=300: A %v param a %v", s.A, s.Params[0].A)
	}
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestRunLabel(t *testing.T) {
	id, _ := rundb.ParseObjectID("0123456789abcdef01234567")
	cases := []struct{ tag, want string }{
		{"patch", "patch-3c765a1"},
		{"a-very-long-branch-name-that-goes-on", "a-very-long-branch-name-3c765a1"},
		// Python slices characters, not bytes.
		{"ÄÖÜ-ääö-long-branch-name-éè", "ÄÖÜ-ääö-long-branch-nam-3c765a1"},
	}
	for _, c := range cases {
		r := &rundb.Run{ID: id, Args: rundb.RunArgs{NewTag: c.tag}}
		if got := RunLabel(r); got != c.want {
			t.Errorf("RunLabel(%q) = %q, want %q", c.tag, got, c.want)
		}
	}
}

func TestNewRunMessage(t *testing.T) {
	build := func(req protocol.RunRequest) *rundb.Run {
		t.Helper()
		r, err := BuildRun(req, "alice", submitTime)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	stc := sprtRunRequest("10+0.1", 1)
	ltc := sprtRunRequest("60+0.6", 8)
	ltc.SPRT.Elo0, ltc.SPRT.Elo1 = refTo(0.5), refTo(2.5)
	ltc.NewTC = "30+0.3"
	ltc.BaseOptions, ltc.NewOptions = "Hash=064", "Threads=8"
	fixed := fixedGamesRequest()
	fixed.NumGames = 60000
	spsa := spsaRunRequest()
	cases := []struct {
		run  *rundb.Run
		want string
	}{
		{build(stc), "SPRT<0.00,2.00> TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16"},
		{build(ltc), "SPRT<0.50,2.50> TC:60+0.6[30+0.3](LTC) Book:UHO_Lichess_4852_v1.epd Threads:8(SMP) Hash:64/0"},
		{build(fixed), "NumGames[60000] TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16"},
		{build(spsa), "SPSA[20000] TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16"},
	}
	for _, c := range cases {
		if got := newRunMessage(c.run); got != c.want {
			t.Errorf("newRunMessage = %q\nwant           %q", got, c.want)
		}
	}
}

// newSubmitScheduler returns a scheduler over a fresh database.
func newSubmitScheduler(t *testing.T) (*Scheduler, *rundb.DB) {
	t.Helper()
	db := rundbtest.Open(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(Config{TaskSemaphoreSize: 5}, db, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger), db
}

func TestCreateAndApproveRun(t *testing.T) {
	ctx := context.Background()
	s, db := newSubmitScheduler(t)

	created, err := s.CreateRun(ctx, sprtRunRequest("60+0.6", 1), "alice")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := db.Runs.Get(ctx, created.ID)
	if err != nil {
		t.Fatalf("the new run is not in the database: %v", err)
	}
	if stored.Args.SPRT == nil || stored.Args.SPRT.BatchSize != 3 || stored.Approved || stored.Args.Username != "alice" ||
		stored.Args.Info != "LTC: try a patch" || !stored.StartTime.Equal(created.StartTime) {
		t.Errorf("stored run = %+v", stored)
	}
	actions, err := db.Actions.Find(ctx, rundb.ActionFilter{Action: "new_run"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 || actions[0].Username != "alice" || actions[0].RunID != created.ID.Hex() ||
		actions[0].Run != RunLabel(created) ||
		actions[0].Message != "SPRT<0.00,2.00> TC:60+0.6(LTC) Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16" {
		t.Errorf("new_run actions = %+v", actions)
	}

	// Approving your own run is refused and changes nothing.
	if err := s.ApproveRun(ctx, created.ID, "alice"); !errors.Is(err, ErrSelfApproval) {
		t.Errorf("self approval = %v, want ErrSelfApproval", err)
	}
	if r, _ := db.Runs.Get(ctx, created.ID); r.Approved || r.Approver != "" {
		t.Errorf("after self approval: approved %v by %q", r.Approved, r.Approver)
	}

	if err := s.ApproveRun(ctx, created.ID, "bob"); err != nil {
		t.Fatalf("approve: %v", err)
	}
	// Written through at once, not left for the flusher.
	if r, _ := db.Runs.Get(ctx, created.ID); !r.Approved || r.Approver != "bob" {
		t.Errorf("after approval the database says approved %v by %q", r.Approved, r.Approver)
	}
	actions, err = db.Actions.Find(ctx, rundb.ActionFilter{Action: "approve_run"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 1 || actions[0].Username != "bob" || actions[0].RunID != created.ID.Hex() ||
		actions[0].Run != RunLabel(created) || actions[0].Message != "approved" {
		t.Errorf("approve_run actions = %+v", actions)
	}

	if err := s.ApproveRun(ctx, created.ID, "carol"); !errors.Is(err, ErrAlreadyApproved) {
		t.Errorf("second approval = %v, want ErrAlreadyApproved", err)
	}
	if r, _ := db.Runs.Get(ctx, created.ID); r.Approver != "bob" {
		t.Errorf("second approval changed the approver to %q", r.Approver)
	}
	if err := s.ApproveRun(ctx, rundb.NewObjectID(), "bob"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("approving a missing run = %v, want ErrRunNotFound", err)
	}
	if actions, _ := db.Actions.Find(ctx, rundb.ActionFilter{Action: "approve_run"}, 10); len(actions) != 1 {
		t.Errorf("refused approvals were logged: %+v", actions)
	}
}

func TestCreateRunReturnsItsOwnCopy(t *testing.T) {
	ctx := context.Background()
	s, _ := newSubmitScheduler(t)
	created, err := s.CreateRun(ctx, fixedGamesRequest(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	created.Args.Info = "changed by the caller"
	snap, err := s.Snapshot(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Args.Info != "try a patch" {
		t.Errorf("the caller's copy is the cached run: info %q", snap.Args.Info)
	}
}

func TestCreateRunNeedsUploadedNets(t *testing.T) {
	ctx := context.Background()
	s, db := newSubmitScheduler(t)
	if err := db.NNs.Insert(ctx, &rundb.NN{Name: testNetA, User: "alice"}); err != nil {
		t.Fatal(err)
	}
	req := fixedGamesRequest()
	req.BaseNets = []string{testNetA}
	req.NewNets = []string{testNetA, testNetB}
	_, err := s.CreateRun(ctx, req, "alice")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "new_nets" || !strings.Contains(fe.Message, testNetB) || strings.Contains(fe.Message, testNetA) {
		t.Fatalf("CreateRun with a missing net = %v", err)
	}
	if n, _ := db.Actions.Find(ctx, rundb.ActionFilter{}, 10); len(n) != 0 {
		t.Errorf("a refused run was logged: %+v", n)
	}

	if err := db.NNs.Insert(ctx, &rundb.NN{Name: testNetB, User: "alice"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.CreateRun(ctx, req, "alice")
	if err != nil {
		t.Fatalf("CreateRun once the nets are uploaded: %v", err)
	}
	if got := strings.Join(r.Args.NewNets, ","); got != testNetA+","+testNetB {
		t.Errorf("new_nets = %s", got)
	}
}
