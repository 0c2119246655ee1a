package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror/gitmirrortest"
	"github.com/shoal-chess/shoal/protocol"
)

// engineRepo is a small engine's repository: master with two commits, a patch on it, a branch
// whose commit names no bench, and a commit whose sources name a network.
type engineRepo struct {
	*gitmirrortest.Repo
	first, master, patch, nobench, withNet string
}

func newEngineRepo(t *testing.T) engineRepo {
	r := engineRepo{Repo: gitmirrortest.New(t)}
	r.first = r.Commit("Start the engine\n\nBench: 1000000", map[string]string{
		"src/search.cpp": "int depth = 1;\nint reduce = 2;\n", "src/evaluate.h": "// no network\n"})
	r.master = r.Commit("Tune depth\n\nBench: 1000001", map[string]string{"src/search.cpp": "int depth = 3;\nint reduce = 2;\n"})
	r.Branch("patch", r.master)
	r.patch = r.Commit("Reduce more\n\n  Reductions   at high depth.\n\n\nSTC: LLR 2.9\nBench: 1000002", map[string]string{
		"src/search.cpp": "int depth = 3;\nint reduce = 4;\nint extra = 1;\n"})
	r.Branch("nobench", r.master)
	r.nobench = r.Commit("An unsigned change", map[string]string{"README": "engine\n"})
	r.Branch("net", r.master)
	r.withNet = r.Commit("Use a network\n\nBench: 1000004", map[string]string{
		"src/evaluate.h": "#define EvalFileDefaultNameBig \"nn-0123456789ab.nnue\"\n#define EvalFileDefaultNameSmall \"nn-ba9876543210.nnue\"\n"})
	r.Checkout("master")
	return r
}

// byBranch is a fixed-games request naming its engines by branch alone.
func (r engineRepo) byBranch(newTag, baseTag string) protocol.RunRequest {
	req := fixedGamesRequest()
	req.TestsRepo = r.Dir
	req.NewTag, req.BaseTag = newTag, baseTag
	req.ResolvedNew, req.ResolvedBase, req.NewSignature, req.BaseSignature, req.Info = "", "", "", "", ""
	return req
}

func TestPrepareRunFillsTheEnginesFromTheirBranches(t *testing.T) {
	repo := newEngineRepo(t)
	s, _ := newTestScheduler(t)
	s.cfg.Sources = repo.Mirrors()
	got, err := s.PrepareRun(context.Background(), repo.byBranch("patch", "master"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"resolved_new":   {got.ResolvedNew, repo.patch},
		"resolved_base":  {got.ResolvedBase, repo.master},
		"new_signature":  {got.NewSignature, "1000002"},
		"base_signature": {got.BaseSignature, "1000001"},
		"msg_new":        {got.MsgNew, "Reduce more"},
		"msg_base":       {got.MsgBase, "Tune depth"},
		// fishtest's description: the bench taken out, spaces and blank lines made single.
		"info": {got.Info, "Reduce more\n Reductions at high depth.\nSTC: LLR 2.9"},
	}
	for field, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %q; want %q", field, v[0], v[1])
		}
	}
	if len(got.NewNets) != 0 || len(got.BaseNets) != 0 {
		t.Errorf("networks %v, %v; want none (the sources name none)", got.NewNets, got.BaseNets)
	}
	// The filled request is one BuildRun accepts.
	if _, err := BuildRun(got, "alice", submitTime); err != nil {
		t.Errorf("BuildRun of the prepared request: %v", err)
	}

	// Networks come from the sources; what was typed is kept.
	req := repo.byBranch("net", "master")
	req.NewSignature, req.Info = "1234567", "my own words"
	got, err = s.PrepareRun(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.NewNets, []string{testNetA, testNetB}) || got.NewSignature != "1234567" || got.Info != "my own words" {
		t.Errorf("nets %v, signature %q, info %q; want the two networks of evaluate.h and the typed signature and info",
			got.NewNets, got.NewSignature, got.Info)
	}
}

func TestPrepareRunTakesTypedCommitsAsGiven(t *testing.T) {
	repo := newEngineRepo(t)
	s, _ := newTestScheduler(t)
	s.cfg.Sources = repo.Mirrors()
	// fishtest's clients give the commits: an empty signature is still filled from the message.
	req := repo.byBranch("patch", "master")
	req.ResolvedNew, req.ResolvedBase, req.BaseSignature = repo.patch, repo.master, "999"
	got, err := s.PrepareRun(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.NewSignature != "1000002" || got.BaseSignature != "999" || got.MsgNew != "Reduce more" {
		t.Errorf("signatures %q, %q, msg %q; want the new one read, the typed base one kept (a warning, not a refusal)",
			got.NewSignature, got.BaseSignature, got.MsgNew)
	}
	// A commit the repository does not hold is no refusal: fishtest's clients are trusted.
	req.ResolvedNew, req.NewSignature = strings.Repeat("ab", 20), "42"
	if got, err = s.PrepareRun(context.Background(), req); err != nil || got.ResolvedNew != req.ResolvedNew {
		t.Errorf("an unknown typed commit: %v, %q; want it accepted as given", err, got.ResolvedNew)
	}
}

func TestPrepareRunRefusesWhatItCannotResolve(t *testing.T) {
	repo := newEngineRepo(t)
	s, _ := newTestScheduler(t)
	s.cfg.Sources = gitmirrortest.NewMirrors(t, repo.Dir, "https://127.0.0.1:1/")
	cases := []struct {
		name        string
		edit        func(*protocol.RunRequest)
		field, want string
	}{
		{"an unknown branch", func(r *protocol.RunRequest) { r.NewTag = "no-such-branch" }, "new_tag", `no branch, tag or commit "no-such-branch"`},
		{"an unknown base", func(r *protocol.RunRequest) { r.BaseTag = "gone" }, "base_tag", `no branch, tag or commit "gone"`},
		{"a ref that could be an option", func(r *protocol.RunRequest) { r.NewTag = "--upload-pack=touch /tmp/x" }, "new_tag", "is not a branch, tag or commit name"},
		{"a commit without a Bench line", func(r *protocol.RunRequest) { r.NewTag = "nobench" }, "new_signature", `has no "Bench: N" line`},
		{"a repository not allowed", func(r *protocol.RunRequest) { r.TestsRepo = t.TempDir() }, "tests_repo", "not allowed"},
		{"another transport", func(r *protocol.RunRequest) { r.TestsRepo = "ssh://github.com/alice/Stockfish" }, "tests_repo", "not allowed"},
		{"a URL that passes a git option", func(r *protocol.RunRequest) { r.TestsRepo = "--upload-pack=touch /tmp/x" }, "tests_repo", "not allowed"},
		{"an unreachable repository", func(r *protocol.RunRequest) { r.TestsRepo = "https://127.0.0.1:1/alice/Stockfish" }, "tests_repo", "not reachable"},
		{"no repository", func(r *protocol.RunRequest) { r.TestsRepo = "" }, "tests_repo", "missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := repo.byBranch("patch", "master")
			c.edit(&req)
			_, err := s.PrepareRun(context.Background(), req)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Message, c.want) {
				t.Fatalf("PrepareRun: %v; want a %s error saying %q", err, c.field, c.want)
			}
		})
	}
}

func TestPrepareRunWithoutMirrorsNeedsCommits(t *testing.T) {
	s, _ := newTestScheduler(t)
	req := fixedGamesRequest()
	if _, err := s.PrepareRun(context.Background(), req); err != nil {
		t.Errorf("a request with its commits on a server without mirrors: %v", err)
	}
	req.ResolvedNew = ""
	var fe *FieldError
	if _, err := s.PrepareRun(context.Background(), req); !errors.As(err, &fe) || fe.Field != "resolved_new" {
		t.Errorf("a branch alone on a server without mirrors: %v; want a resolved_new error", err)
	}
}

func TestCreateRunUsesTheBooksTheServerHolds(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestScheduler(t)
	held, err := books.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Books = held
	req := fixedGamesRequest()
	r, err := s.CreateRun(ctx, req, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if r.Args.Book != books.ShippedDefault {
		t.Errorf("book %q; want the server's default, %q, while it lacks fishtest's", r.Args.Book, books.ShippedDefault)
	}
	req.Book = books.FishtestDefault
	_, err = s.CreateRun(ctx, req, "alice")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "book" || !strings.Contains(fe.Message, books.ShippedDefault) {
		t.Fatalf("a book the server lacks: %v; want a book error naming the books it has", err)
	}
	if _, err := held.Add(books.FishtestDefault, strings.NewReader("8/8/8/8/8/8/8/K6k w - -\n")); err != nil {
		t.Fatal(err)
	}
	req.Book = ""
	if r, err = s.CreateRun(ctx, req, "alice"); err != nil || r.Args.Book != books.FishtestDefault {
		t.Errorf("once the server holds fishtest's default book: %v, book %q; want it the default", err, r.Args.Book)
	}
}

func TestInfoFromMessage(t *testing.T) {
	cases := []struct{ msg, want string }{
		{"Subject\n\nBody\n\nBench: 4979757", "Subject\nBody"},
		// The last line that names a bench loses it, the subject too.
		{"Subject bench 1234\n\nMore\nNo functional change.\n", "Subject\nMore\nNo functional change."},
		{"Two benches\n\nbench: 111\nBench: 222 extra", "Two benches\nbench: 111\n extra"},
		{"  Tabs\tand   spaces  ", "Tabs and spaces"},
	}
	for _, c := range cases {
		if got := infoFromMessage(c.msg); got != c.want {
			t.Errorf("infoFromMessage(%q) = %q; want %q", c.msg, got, c.want)
		}
	}
}
