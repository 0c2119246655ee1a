package runs_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror/gitmirrortest"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
)

// engineRepo is a small engine's repository: master with two commits; patch on master; sibling,
// a branch from master's first commit; nobench, a commit whose message names no bench.
type engineRepo struct {
	*gitmirrortest.Repo
	first, master, patch, sibling, nobench, binary string
}

func newEngineRepo(t *testing.T) engineRepo {
	r := engineRepo{Repo: gitmirrortest.New(t)}
	r.first = r.Commit("Start the engine\n\nBench: 1000000", map[string]string{"src/search.cpp": "int depth = 1;\nint reduce = 2;\n"})
	r.master = r.Commit("Tune depth\n\nBench: 1000001", map[string]string{"src/search.cpp": "int depth = 3;\nint reduce = 2;\n"})
	r.Branch("patch", r.master)
	r.patch = r.Commit("Reduce more at high depth\n\nBench: 1000002", map[string]string{
		"src/search.cpp": "int depth = 3;\nint reduce = 4;\nint extra = 1;\n"})
	r.Branch("sibling", r.first)
	r.sibling = r.Commit("Elsewhere\n\nBench: 1000003", map[string]string{"README": "other\n"})
	r.Branch("nobench", r.master)
	r.nobench = r.Commit("An unsigned change", map[string]string{"README": "engine\n"})
	// A NUL byte in a source file compiles, but git reads the file as binary.
	r.Branch("binary", r.master)
	r.binary = r.Commit("Weights\n\nBench: 1000005", map[string]string{"src/weights.cpp": "int w[] = {1};\x00\n"})
	r.Checkout("master")
	return r
}

// newSourcesEnv is a UI over mirrors that allow repo (and an unreachable https prefix) and a
// fresh books directory.
func newSourcesEnv(t *testing.T, repo engineRepo) (*uiEnv, *books.Store) {
	t.Helper()
	mirrors := gitmirrortest.NewMirrors(t, repo.Dir, "https://127.0.0.1:1/")
	held, err := books.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := newUIEnvSched(t, scheduler.Config{Sources: mirrors, Books: held}, func(d *server.Deps) {
		d.Mirrors, d.Books = mirrors, held
	})
	return env, held
}

// byBranchForm is the form as a developer fills it: the repository and two branch names, no
// commit, signature or description.
func byBranchForm(repo engineRepo) url.Values {
	return formWith(runFormValues(), "tests-repo", repo.Dir, "test-branch", "patch", "base-branch", "master",
		"resolved_new", "", "resolved_base", "", "test-signature", "", "base-signature", "", "run-info", "", "book", "")
}

func TestUISubmitByBranch(t *testing.T) {
	repo := newEngineRepo(t)
	env, _ := newSourcesEnv(t, repo)
	w := env.as("alice").Post("/tests/run", byBranchForm(repo))
	if w.Code != http.StatusSeeOther {
		t.Fatalf("status %d\n%s", w.Code, body(w))
	}
	r := env.submittedRun(w)
	a := r.Args
	if a.ResolvedNew != repo.patch || a.ResolvedBase != repo.master || a.NewSignature != "1000002" || a.BaseSignature != "1000001" ||
		a.MsgNew != "Reduce more at high depth" || a.Info != "Reduce more at high depth" || a.Book != books.ShippedDefault {
		t.Fatalf("stored %+v; want the branches' commits, benches, message and the server's default book", a)
	}

	// The run's page shows the patch, from the merge base of base and new to new, with the
	// approval under it, and says that fishtest's worker cannot play it.
	page := body(env.as("bob").Get("/tests/view/" + r.ID.Hex()))
	for _, want := range []string{
		`<a href="#patch-file-1">src/search.cpp</a>`, `<td class="num diff-add">+2</td><td class="num diff-del">&minus;1</td>`,
		`<tr class="del"><td class="ln">2</td><td class="ln"></td><td class="code"><span class="op">-</span>int reduce = 2;</td></tr>`,
		`<tr class="add"><td class="ln"></td><td class="ln">3</td><td class="code"><span class="op">&#43;</span>int extra = 1;</td></tr>`,
		`@@ -1,2 &#43;1,3 @@`, `id="patch-approve"`, "only Shoal&#39;s worker",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the run's page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="form-approve" class="inline"`) {
		t.Error("the approval is in the actions bar too; want it under the patch")
	}
	if strings.Contains(page, "Warning: base") || strings.Contains(page, "signature") && strings.Contains(page, "is not the bench") {
		t.Errorf("warnings on a run whose base is master's tip and whose signatures are the commits':\n%s", warningsOf(page))
	}
	// The approval under the patch approves.
	bob := env.as("bob")
	if w := bob.Post("/tests/approve", url.Values{"run-id": {r.ID.Hex()}}); w.Code != http.StatusSeeOther {
		t.Fatalf("approve: %d\n%s", w.Code, body(w))
	}
	if !env.runNow(r.ID).Approved {
		t.Error("not approved")
	}
}

func TestUISubmitByBranchRefusals(t *testing.T) {
	repo := newEngineRepo(t)
	env, _ := newSourcesEnv(t, repo)
	alice := env.as("alice")
	cases := []struct {
		name        string
		kv          []string
		field, want string
	}{
		{"an unknown branch", []string{"test-branch", "no-such-branch"}, "test-branch", "no branch, tag or commit"},
		{"a commit without a Bench line", []string{"test-branch", "nobench"}, "test-signature", "no &#34;Bench: N&#34; line"},
		{"a repository not allowed", []string{"tests-repo", "/srv/other/stockfish.git"}, "tests-repo", "not allowed"},
		{"a URL passing a git option", []string{"tests-repo", "--upload-pack=touch /tmp/pwned"}, "tests-repo", "not allowed"},
		{"another transport", []string{"tests-repo", "git://github.com/alice/Stockfish"}, "tests-repo", "not allowed"},
		{"an unreachable repository", []string{"tests-repo", "https://127.0.0.1:1/alice/Stockfish"}, "tests-repo", "not reachable"},
		{"a book the server lacks", []string{"book", "UHO_Lichess_4852_v1.epd"}, "book", "which holds " + books.ShippedDefault},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := env.runCount()
			form := formWith(byBranchForm(repo), c.kv...)
			w := alice.Post("/tests/run", form)
			page := body(w)
			if w.Code != http.StatusBadRequest || !formMarked(page, c.field) || !strings.Contains(page, c.want) {
				t.Fatalf("status %d, %s marked %v; want 400 with %s marked, saying %q\n%s", w.Code, c.field,
					formMarked(page, c.field), c.field, c.want, errorSummary(page))
			}
			for _, name := range []string{"tests-repo", "test-branch", "base-branch", "book"} {
				if got, _ := formInputValue(page, name); got != form.Get(name) {
					t.Errorf("the form shows %s = %q; want what was typed, %q", name, got, form.Get(name))
				}
			}
			if n := env.runCount(); n != before {
				t.Errorf("%d runs after a refusal; want %d", n, before)
			}
		})
	}
}

func TestUIRunPageWarnsAboutTheRepository(t *testing.T) {
	repo := newEngineRepo(t)
	env, _ := newSourcesEnv(t, repo)
	alice := env.as("alice")
	cases := []struct {
		name                  string
		newSHA, baseSHA, sigs string
		want                  string // "" for no warning
	}{
		{"a patch on master's tip", repo.patch, repo.master, "", ""},
		{"a signature its commit does not say", repo.patch, repo.master, "999", "the test signature 999 is not the bench of its commit, whose message says Bench: 1000002"},
		{"a base behind the latest common ancestor", repo.patch, repo.first, "", "base is not the latest common ancestor of new and master"},
		{"a base that is not an ancestor of new", repo.sibling, repo.master, "", "base is not an ancestor of new"},
		{"a base off the default branch", repo.patch, repo.sibling, "", "base is not an ancestor of master"},
		{"a source file git reads as binary", repo.binary, repo.master, "",
			"the patch changes 1 file that git reads as binary, whose changes are not shown: src/weights.cpp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// As fishtest's clients submit: commits and signatures typed in, accepted as they are.
			form := formWith(byBranchForm(repo), "resolved_new", c.newSHA, "resolved_base", c.baseSHA, "test-signature", c.sigs,
				"run-info", "typed")
			w := alice.Post("/tests/run", form)
			if w.Code != http.StatusSeeOther {
				t.Fatalf("status %d; want the typed commits accepted\n%s", w.Code, errorSummary(body(w)))
			}
			r := env.submittedRun(w)
			warnings := warningsOf(body(alice.Get("/tests/view/" + r.ID.Hex())))
			repoWarnings := regexp.MustCompile(`(?m)^Warning: (base .*|the (test|base) signature .*|the patch changes .*)$`).FindAllString(warnings, -1)
			switch {
			case c.want == "" && len(repoWarnings) > 0:
				t.Errorf("warnings %q; want none", repoWarnings)
			case c.want != "" && (len(repoWarnings) != 1 || repoWarnings[0] != "Warning: "+c.want):
				t.Errorf("warnings %q; want %q alone", repoWarnings, c.want)
			}
		})
	}
}

func TestUIRunPageShowsBuildFailures(t *testing.T) {
	repo := newEngineRepo(t)
	env, _ := newSourcesEnv(t, repo)
	w := env.as("alice").Post("/tests/run", byBranchForm(repo))
	r := env.submittedRun(w)
	log := "Build failed: 1234567890 (make -j2 build ARCH=x86-64): exit status 2\nsearch.cpp:3: error: <expected> ';'"
	err := env.Runs.Change(context.Background(), r.ID, func(r *rundb.Run) (runcache.Prio, error) {
		r.BuildFailures = []rundb.BuildFailure{{Worker: "wendy-4cores-ab12", TaskID: 0, Time: time.Now(), Message: log}}
		return runcache.PrioSaveNow, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	page := body(env.anon().Get("/tests/view/" + r.ID.Hex()))
	if !strings.Contains(page, "<strong>wendy-4cores-ab12</strong>") || !strings.Contains(page, `<pre class="build-log">`+html.EscapeString(log)+`</pre>`) {
		t.Errorf("the page does not show the build failure's worker and log, escaped:\n%s", page)
	}
	if !strings.Contains(page, "(not counted: its user has fewer CPU hours") {
		t.Error("the page does not say that the report does not count towards the stop")
	}
}

func TestUIRunPageWithoutTheCommitsInTheMirror(t *testing.T) {
	repo := newEngineRepo(t)
	env, _ := newSourcesEnv(t, repo)
	form := formWith(byBranchForm(repo), "resolved_new", strings.Repeat("ab", 20), "test-signature", "42", "run-info", "typed")
	w := env.as("alice").Post("/tests/run", form)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("status %d\n%s", w.Code, errorSummary(body(w)))
	}
	page := body(env.anon().Get("/tests/view/" + env.submittedRun(w).ID.Hex()))
	if !strings.Contains(page, "does not hold commit abababab") {
		t.Errorf("the page does not say that the mirror lacks the commit")
	}
}

// warningsOf is the warnings card's text, a line each.
func warningsOf(page string) string {
	var lines []string
	for _, m := range regexp.MustCompile(`<p class="(?:warning|note)">([^<]*)</p>`).FindAllStringSubmatch(page, -1) {
		lines = append(lines, html.UnescapeString(m[1]))
	}
	return strings.Join(lines, "\n")
}

// errorSummary is the form's list of refused fields.
func errorSummary(page string) string {
	if m := regexp.MustCompile(`(?s)<div class="flash flash-error error-summary".*?</div>`).FindString(page); m != "" {
		return m
	}
	return "(no error summary)"
}
