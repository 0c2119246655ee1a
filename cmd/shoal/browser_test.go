//go:build !race

// The web UI in a real browser: headless Chromium driven through the DevTools protocol
// (chromedp), against the real server and a simulated fleet, as a person would use it. It runs
// in make test's race-free pass. Without Chromium it is skipped, except in CI (CI=true), where
// .ci/run installs it and a missing browser is a failure.

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/shoal-chess/shoal/worker/fleet"
)

// screenshotDir is where the browser test saves its screenshots: artifacts/screenshots at the
// top of the repository (git-ignored), or $SHOAL_SCREENSHOTS.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("SHOAL_SCREENSHOTS"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "artifacts", "screenshots")
}

// findChromium returns the browser to drive, or skips the test (fails it in CI).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium on PATH: .ci/run installs Debian's chromium package")
	}
	t.Skip("no Chromium on PATH (Debian: apt-get install chromium); the browser test needs it")
	return ""
}

// tab is one browser tab on a running Shoal.
type tab struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
}

// newBrowser starts a headless Chromium with a fresh profile and returns a tab in it.
func newBrowser(t *testing.T, base string) *tab {
	t.Helper()
	if testing.Short() {
		t.Skip("browser: skipped with -short")
	}
	exe := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })

	// Accept every confirm() the pages ask (stop, delete): a person would click OK.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()

	shots := screenshotDir(t)
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &tab{t: t, ctx: ctx, base: base, shots: shots}
}

// do runs browser steps, failing the test with what was being done.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("%s: %v\n(at %s)\n%s", what, err, loc, truncateText(html, 3000))
	}
}

func truncateText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// open loads a page and waits for it.
func (b *tab) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitReady("body"))
}

// submitVia clicks sel (a submit button) and waits for the page it loads.
func (b *tab) submitVia(sel string) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel))))
	if err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
	b.do("wait for the page after "+sel, chromedp.WaitReady("body"))
}

// fill sets form fields: CSS selector -> value.
func (b *tab) fill(fields map[string]string) {
	b.t.Helper()
	for sel, v := range fields {
		b.do("fill "+sel, chromedp.SetValue(chromedp.CSS(sel), v))
	}
}

// text returns the visible text of the first element matching sel.
func (b *tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// bodyText returns the page's whole visible text.
func (b *tab) bodyText() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		b.t.Fatalf("read the page: %v", err)
	}
	return s
}

// location returns the current URL's path and query.
func (b *tab) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.TrimPrefix(loc, b.base)
}

// shot saves a full-page screenshot as NAME.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// login logs in through the form.
func (b *tab) login(user, password string) {
	b.t.Helper()
	b.open("/login")
	b.fill(map[string]string{`input[name="username"]`: user, `input[name="password"]`: password})
	b.submitVia(`form[action="/login"] button[type="submit"]`)
	if body := b.bodyText(); !strings.Contains(body, user) || strings.Contains(b.location(), "/login") {
		b.t.Fatalf("login as %s did not succeed: at %s\n%s", user, b.location(), truncateText(body, 2000))
	}
}

// logout logs out through the header's form.
func (b *tab) logout() {
	b.t.Helper()
	b.submitVia(`form[action="/logout"] button`)
}

// waitText waits until the text of sel satisfies ok, polling without reloading the page.
func (b *tab) waitText(sel string, within time.Duration, ok func(string) bool) string {
	b.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
		if err == nil {
			last = strings.TrimSpace(s)
			if ok(last) {
				return last
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	b.t.Fatalf("%s stayed %q for %v", sel, last, within)
	return ""
}

var runIDInPath = regexp.MustCompile(`/tests/view/([0-9a-f]{24})`)

// TestBrowserSignupSubmitApproveWatchStop walks the path a new developer takes: sign up, be
// accepted, log in, submit an SPRT test, have an approver approve it, watch a fleet's results
// arrive on the open page without a reload, stop the test and find it all in the event log.
func TestBrowserSignupSubmitApproveWatchStop(t *testing.T) {
	srv := startE2E(t, 8)
	b := newBrowser(t, srv.base)

	// Sign up.
	const newUser, newPassword = "newdev", "correct horse battery staple"
	b.open("/signup")
	b.fill(map[string]string{
		`input[name="username"]`:  newUser,
		`input[name="password"]`:  newPassword,
		`input[name="password2"]`: newPassword,
		`input[name="email"]`:     "newdev@example.org",
	})
	b.shot("signup")
	b.submitVia(`form[action="/signup"] button[type="submit"]`)
	if body := b.bodyText(); !strings.Contains(strings.ToLower(body), "approver") {
		t.Fatalf("after signing up the page does not say an approver must accept the account:\n%s", body)
	}

	// A pending account cannot log in yet.
	b.open("/login")
	b.fill(map[string]string{`input[name="username"]`: newUser, `input[name="password"]`: newPassword})
	b.submitVia(`form[action="/login"] button[type="submit"]`)
	if body := b.bodyText(); !strings.Contains(body, "pending") {
		t.Fatalf("a pending user's login does not say the account is pending:\n%s", body)
	}

	// The approver accepts the new account from the user management page.
	b.login(srv.users.Approver.Name, srv.users.Approver.Password)
	b.open("/user_management")
	if !strings.Contains(b.bodyText(), newUser) {
		t.Fatalf("%s is not among the pending users:\n%s", newUser, b.bodyText())
	}
	b.shot("user_management")
	b.open("/user/" + newUser)
	b.submitVia(`#form-accept button[type="submit"]`)
	b.logout()

	// The new developer logs in and submits an SPRT test through the form.
	b.login(newUser, newPassword)
	b.open("/tests/run")
	b.fill(map[string]string{
		`input[name="base-branch"]`:    "master",
		`input[name="test-branch"]`:    "browser-patch",
		`input[name="resolved_base"]`:  "0123456789abcdef0123456789abcdef01234567",
		`input[name="resolved_new"]`:   "89abcdef0123456789abcdef0123456789abcdef",
		`input[name="base-signature"]`: "2050811",
		`input[name="tests-repo"]`:     "https://github.com/official-stockfish/Stockfish",
		`input[name="test-signature"]`: "2061234",
		`input[name="tc"]`:             "10+0.1",
		`input[name="sprt_elo0"]`:      "0",
		`input[name="sprt_elo1"]`:      "2",
		`textarea[name="run-info"]`:    "submitted from a real browser",
	})
	b.do("choose SPRT", chromedp.Click(chromedp.CSS(`input[name="stop_rule"][value="sprt"]`)))
	b.shot("new_test_form")
	b.submitVia(`#form-run button[type="submit"]`)
	m := runIDInPath.FindStringSubmatch(b.location())
	if m == nil {
		t.Fatalf("submitting the form did not lead to the run's page: at %s\n%s", b.location(), b.bodyText())
	}
	runID := m[1]
	b.logout()

	// A second user, an approver, approves it.
	b.login(srv.users.Approver.Name, srv.users.Approver.Password)
	b.open("/tests/view/" + runID)
	b.submitVia(`#form-approve button[type="submit"]`)
	if body := b.bodyText(); !strings.Contains(strings.ToLower(body), "approved") {
		t.Fatalf("the run page does not say the run is approved:\n%s", body)
	}

	// A fleet plays; the open page shows the games and the LLR change without a reload.
	b.open("/tests/view/" + runID)
	b.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.__shoalNoReload = true`))
	games0 := b.text("#run-games")
	llr0 := b.text("#run-llr")
	fleetCtx, stopFleet := context.WithCancel(context.Background())
	fleetDone := make(chan error, 1)
	go func() {
		_, err := fleet.Run(fleetCtx, fleet.Options{
			ServerURL: srv.base, Username: srv.users.Workers.Name, Password: srv.users.Workers.Password,
			Workers: 4, Concurrency: 2, Elo: 1, DrawRatio: 0.5, TimeScale: e2eScale, Seed: 6,
		})
		fleetDone <- err
	}()
	t.Cleanup(func() { stopFleet(); <-fleetDone })
	games1 := b.waitText("#run-games", time.Minute, func(s string) bool { return s != games0 && s != "" })
	llr1 := b.waitText("#run-llr", 30*time.Second, func(s string) bool { return s != llr0 && s != "" })
	stillHere, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__shoalNoReload === true`))
	if err != nil || !stillHere {
		t.Fatalf("the page reloaded to show new results (marker gone: %v, %v)", stillHere, err)
	}
	t.Logf("live: games %q -> %q, LLR %q -> %q", games0, games1, llr0, llr1)
	b.waitText("#run-games", time.Minute, func(s string) bool { return s != games1 })
	b.shot("run_live")
	b.open("/tests")
	b.shot("tests_home")
	b.open("/tests/machines")
	b.shot("machines")
	b.logout()

	// The submitter stops the test.
	b.login(newUser, newPassword)
	b.open("/tests/view/" + runID)
	b.submitVia(`#form-stop button[type="submit"]`)
	stopFleet()
	if body := b.bodyText(); !strings.Contains(strings.ToLower(body), "finished") && !strings.Contains(strings.ToLower(body), "stopped") {
		t.Fatalf("after stopping, the run page does not say the run is finished:\n%s", body)
	}
	b.shot("run_stopped")

	// The event log has the whole story.
	b.open("/actions?run_id=" + runID)
	body := b.bodyText()
	for _, want := range []string{"new_run", "approve_run", "stop_run"} {
		if !strings.Contains(body, want) {
			t.Errorf("/actions for the run lacks %s:\n%s", want, body)
		}
	}
	b.shot("actions")

	// The other main pages, for the record.
	for _, p := range []struct{ path, name string }{
		{"/tests/finished", "tests_finished"}, {"/tests/stats/" + runID, "run_stats"},
		{"/tests/live_elo/" + runID, "live_elo"}, {"/contributors", "contributors"},
		{"/nns", "nns"}, {"/sprt_calc?elo-model=normalized&elo-0=0.5&elo-1=2.5&draw-ratio=0.6", "sprt_calc"},
		{"/user", "profile"},
	} {
		b.open(p.path)
		if strings.Contains(b.bodyText(), "not built yet") {
			t.Errorf("%s is not built", p.path)
		}
		b.shot(p.name)
	}
	fmt.Fprintln(os.Stderr, "screenshots in", b.shots)
}
