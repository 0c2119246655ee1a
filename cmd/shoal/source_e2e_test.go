//go:build !race

// From a branch to a verdict, on a real engine: Stockfish 11's repository (a fixture kept outside
// the repository, SHOAL_TEST_SF_FIXTURE; `make test` passes it) submitted by branch name through
// the web form and `shoal run new`, its patch on the run's page, and `shoal worker --build`
// building both commits from the server's archives and playing them. Builds take about 20 s
// each, so this runs in make test's race-free pass.

package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/rundb"
)

// The fixture's commits and their Bench: lines (its README).
const (
	sfPatchBranch = "tweak-capture-reductions"
	sfBaseBranch  = "tweak-futility"
	sfPatchSHA    = "7150183d07a40653aff6ba64a73f27fe049f525d"
	sfBaseSHA     = "4901218d4cc31658942486ccd1dbadf2d2df783a"
	sfPatchBench  = "4979757"
	sfBaseBench   = "4643972"
)

// sfFixture is the path of Stockfish 11's repository fixture, from SHOAL_TEST_SF_FIXTURE. Without
// it the test is skipped, except in CI, where it fails: there the fixture must be found.
func sfFixture(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SHOAL_TEST_SF_FIXTURE")
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	msg := fmt.Sprintf("Stockfish 11's fixture not found (SHOAL_TEST_SF_FIXTURE=%q; make test sets it from SF_FIXTURE)", path)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func TestE2EBuildFromSource(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	for _, tool := range []string{"git", "make", "g++", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	fixture := sfFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	repo, err := demo.Unpack(fixture, filepath.Join(dir, "fixture"))
	if err != nil {
		t.Fatal(err)
	}
	broken := addBrokenBranch(t, repo, filepath.Join(dir, "work"))

	// Real games at real time (one worker a core), tasks of about ten games.
	cfg := testConfig(filepath.Join(dir, "data"), 1)
	cfg.ReposAllowed = append(cfg.ReposAllowed, repo)
	cfg.TaskDuration = 150 * time.Second
	log := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", log)
		}
	})
	inst := startTestInstance(t, cfg, log)
	base := "http://" + inst.Addr()
	users, err := demo.CreateUsers(ctx, inst.DB(), 4)
	if err != nil {
		t.Fatal(err)
	}

	// 1. By branch names only, through the form and through shoal run new.
	formRun := submitByForm(t, base, users.Submitter, repo)
	var cliOut, cliErr lockedBuffer
	err = run(ctx, []string{"run", "new", "--server", base, "--username", users.Submitter.Name, "--password", users.Submitter.Password,
		"--tests-repo", repo, "--new-tag", sfPatchBranch, "--base-tag", sfBaseBranch, "--tc", "10+0.1", "--num-games", "1000"},
		envOf(nil), &cliOut, &cliErr)
	if err != nil {
		t.Fatalf("shoal run new: %v\n%s", err, &cliErr)
	}
	cliRun := strings.TrimSpace(cliOut.String())
	if !strings.Contains(cliErr.String(), sfPatchSHA) || !strings.Contains(cliErr.String(), "bench "+sfPatchBench) {
		t.Errorf("shoal run new does not show what the branches resolved to:\n%s", &cliErr)
	}
	for _, id := range []string{formRun, cliRun} {
		var r struct {
			Args struct {
				ResolvedNew   string `json:"resolved_new"`
				ResolvedBase  string `json:"resolved_base"`
				NewSignature  string `json:"new_signature"`
				BaseSignature string `json:"base_signature"`
			} `json:"args"`
		}
		if code := doJSON(t, http.MethodGet, base+"/api/get_run/"+id, nil, &r); code != http.StatusOK {
			t.Fatalf("get_run %s: %d", id, code)
		}
		if a := r.Args; a.ResolvedNew != sfPatchSHA || a.ResolvedBase != sfBaseSHA || a.NewSignature != sfPatchBench || a.BaseSignature != sfBaseBench {
			t.Errorf("run %s holds %+v; want %s/%s with benches %s/%s", id, a, sfPatchSHA, sfBaseSHA, sfPatchBench, sfBaseBench)
		}
	}

	// 2. The run's page shows the patch, with the counts git gives.
	numstat := strings.Fields(gitIn(t, repo, "diff", "--numstat", sfBaseSHA, sfPatchSHA))
	if len(numstat) != 3 || numstat[2] != "src/search.cpp" {
		t.Fatalf("git diff --numstat: %q", numstat)
	}
	_, page := get(t, base+"/tests/view/"+formRun)
	row := fmt.Sprintf(`src/search.cpp</a></td>
<td class="num diff-add">+%s</td><td class="num diff-del">&minus;%s</td>`, numstat[0], numstat[1])
	if !strings.Contains(page, row) {
		t.Errorf("the run's page does not list src/search.cpp with +%s -%s (git diff --numstat)", numstat[0], numstat[1])
	}

	// 3. A worker builds both commits from the server's archives and plays two tasks: the second
	// uses the engines the first built.
	approve(t, base, users, cliRun)
	wdir := filepath.Join(dir, "worker")
	out := runWorker(t, base, users, wdir, "e2e1", 2)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`msg="Fetched the source" .*sha=7150183d07 .*sha256=ok`),
		regexp.MustCompile(`msg="Fetched the source" .*sha=4901218d4c .*sha256=ok`),
		regexp.MustCompile(`msg="Built the engine" .*sha=7150183d07 `),
		regexp.MustCompile(`msg="Built the engine" .*sha=4901218d4c `),
		regexp.MustCompile(`msg="Using the engine built before" .*sha=7150183d07 `),
		regexp.MustCompile(`msg="Using the engine built before" .*sha=4901218d4c `),
	} {
		if !want.MatchString(out) {
			t.Errorf("the worker's log lacks %s\n%s", want, out)
		}
	}
	if n := strings.Count(out, `msg="Built the engine"`); n != 2 {
		t.Errorf("%d builds; want 2, one a commit", n)
	}
	if strings.Contains(out, "Wrong bench") {
		t.Errorf("a bench did not match its signature:\n%s", out)
	}
	played, err := inst.Primary().Scheduler().Snapshot(ctx, mustID(t, cliRun))
	if err != nil {
		t.Fatal(err)
	}
	games := played.Results.Wins + played.Results.Losses + played.Results.Draws
	if games == 0 || len(played.Tasks) != 2 {
		t.Fatalf("%d games in %d tasks; want games from two tasks", games, len(played.Tasks))
	}
	if pgns := countPGNs(t, base, cliRun); pgns != games {
		t.Errorf("%d games uploaded; the run counts %d", pgns, games)
	}
	// Nothing of the sources stays on the worker's disk: only the engines it built.
	filepath.WalkDir(wdir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && regexp.MustCompile(`\.(cpp|h|git)$|Makefile$`).MatchString(path) {
			t.Errorf("the worker kept a source file: %s", path)
		}
		return nil
	})

	// 4. A branch that does not compile: its log reaches the run's page, and three workers'
	// failures stop the run.
	id, err := inst.Primary().Scheduler().RunLabel(ctx, mustID(t, cliRun))
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Primary().Scheduler().StopRunByUser(ctx, mustID(t, cliRun), users.Submitter.Name); err != nil {
		t.Fatalf("stop %s: %v", id, err)
	}
	// The workers' user may stop runs (the CPU hours stop_run asks for), so its workers'
	// failures count.
	if err := inst.DB().UserCache.Put(ctx, &rundb.UserStats{Username: users.Workers.Name, CPUHours: 1000}); err != nil {
		t.Fatal(err)
	}
	req := demo.RunRequest("")
	req.TestsRepo, req.NewTag, req.BaseTag = repo, "broken", sfBaseBranch
	req.ResolvedNew, req.ResolvedBase, req.NewSignature, req.BaseSignature = "", "", "", ""
	req.NumGames = 1000
	brokenRun, err := demo.SubmitRun(ctx, base, users, req)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	logs := make([]string, 3)
	for i := range logs {
		wg.Go(func() {
			logs[i] = runWorker(t, base, users, filepath.Join(dir, fmt.Sprintf("broken%d", i)), fmt.Sprintf("bad%d", i), 1)
		})
	}
	wg.Wait()
	var stopped struct {
		Finished      bool `json:"finished"`
		Failed        bool `json:"failed"`
		BuildFailures []struct {
			Message string `json:"message"`
		} `json:"build_failures"`
	}
	doJSON(t, http.MethodGet, base+"/api/get_run/"+brokenRun, nil, &stopped)
	if !stopped.Finished || !stopped.Failed || len(stopped.BuildFailures) != 3 {
		t.Fatalf("the broken run: finished %v, failed %v, %d build failures; want stopped after three workers\n%s",
			stopped.Finished, stopped.Failed, len(stopped.BuildFailures), strings.Join(logs, "\n---\n"))
	}
	_, page = get(t, base+"/tests/view/"+brokenRun)
	if !strings.Contains(page, `<pre class="build-log">Build failed: `+broken[:10]) || !strings.Contains(page, "this_is_not_cpp") {
		t.Errorf("the broken run's page does not show the build's log tail:\n%s", page)
	}
}

// addBrokenBranch adds to the bare repository repo a branch "broken" on tweak-futility whose
// search.cpp does not compile, committed in a work clone at work, and returns its commit.
func addBrokenBranch(t *testing.T, repo, work string) string {
	t.Helper()
	gitIn(t, filepath.Dir(repo), "clone", "-q", "--branch", sfBaseBranch, repo, work)
	path := filepath.Join(work, "src", "search.cpp")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(src, []byte("\nthis_is_not_cpp;\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, work, "-c", "user.name=Ada Tester", "-c", "user.email=ada@example.org", "commit", "-q", "-am", "A patch that does not compile\n\nBench: "+sfBaseBench)
	gitIn(t, work, "push", "-q", "origin", "HEAD:refs/heads/broken")
	return gitIn(t, work, "rev-parse", "HEAD")
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// submitByForm submits the fixture's patch through the new-test form, with the branch names
// alone, as a developer would, and returns the run's id.
func submitByForm(t *testing.T, base string, u demo.Account, repo string) string {
	t.Helper()
	_, client := webLogin(t, base+"/", u.Name, u.Password)
	form := url.Values{
		"csrf_token": {csrfTokenOf(t, client, base+"/tests/run")},
		"tests-repo": {repo}, "test-branch": {sfPatchBranch}, "base-branch": {sfBaseBranch},
		"new-options": {"Hash=16"}, "base-options": {"Hash=16"}, "stop_rule": {"numgames"}, "num-games": {"1000"},
		"bounds": {"stc"}, "elo_model": {"normalized"}, "tc": {"10+0.1"}, "threads": {"1"}, "priority": {"0"},
		"throughput": {"100"}, "book-depth": {"8"},
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.PostForm(base+"/tests/run", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc := regexp.MustCompile(`^/tests/view/([0-9a-f]{24})\?follow=1$`).FindStringSubmatch(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc == nil {
		t.Fatalf("the form: %d to %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	return loc[1]
}

func approve(t *testing.T, base string, u demo.Users, id string) {
	t.Helper()
	body := map[string]any{"username": u.Approver.Name, "password": u.Approver.Password, "run_id": id}
	if code := doJSON(t, http.MethodPost, base+"/api/approve_run", body, nil); code != http.StatusOK {
		t.Fatalf("approve %s: %d", id, code)
	}
}

// runWorker runs `shoal worker --build` in this process until it has handled tasks tasks, and
// returns its log.
func runWorker(t *testing.T, base string, u demo.Users, dir, prefix string, tasks int) string {
	t.Helper()
	var out lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	err := run(ctx, []string{"worker", "--server", base, "--username", u.Workers.Name, "--password", u.Workers.Password,
		"--build", "--dir", dir, "--concurrency", "1", "--speed-factor", "0.04", "--uuid-prefix", prefix,
		"--max-tasks", fmt.Sprint(tasks)}, envOf(nil), &out, &out)
	if err != nil {
		t.Errorf("shoal worker: %v\n%s", err, &out)
	}
	return out.String()
}

// countPGNs is how many games run id's uploaded PGNs hold.
func countPGNs(t *testing.T, base, id string) int {
	t.Helper()
	resp, err := http.Get(base + "/api/run_pgns/" + id + ".pgn.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(zr)
	return strings.Count(string(text), "[Event ")
}
