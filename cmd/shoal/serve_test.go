package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/embedded"
)

// lockedBuffer is an io.Writer safe to read while the server writes to it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var browseLine = regexp.MustCompile(`Shoal is ready: browse (http://\S+/)`)

// startServe runs `shoal serve` in-process and returns its base URL, its output and a stop
// function that ends it and returns run's error.
func startServe(t *testing.T, env map[string]string, args ...string) (string, *lockedBuffer, func() error) {
	t.Helper()
	return startInProcess(t, "serve", browseLine, env, args...)
}

// startInProcess runs the subcommand in-process until its output matches ready, and returns
// ready's first submatch, the output and a stop function that cancels its context, as a signal
// would, and returns run's error.
func startInProcess(t *testing.T, subcommand string, ready *regexp.Regexp, env map[string]string, args ...string) (string, *lockedBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{subcommand}, args...), envOf(env), out, io.Discard) }()
	deadline := time.After(60 * time.Second)
	for {
		if m := ready.FindStringSubmatch(out.String()); m != nil {
			var once sync.Once
			var err error
			stop := func() error {
				once.Do(func() { cancel(); err = <-done })
				return err
			}
			t.Cleanup(func() { _ = stop() })
			return m[1], out, stop
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("%s exited before it was ready: %v\n%s", subcommand, err, out)
		case <-deadline:
			cancel()
			t.Fatalf("%s not ready after 60 s:\n%s", subcommand, out)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// openStopped opens the embedded database a stopped server left in data, closed when the test
// ends.
func openStopped(t *testing.T, data string) *rundb.DB {
	t.Helper()
	db, err := rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	return db
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// webLogin logs in through the web UI's form, as a browser would (cookie jar, CSRF token from
// the form), and returns the page it lands on and the logged-in client.
func webLogin(t *testing.T, base, username, password string) (string, *http.Client) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := client.PostForm(base+"login", url.Values{"csrf_token": {csrfTokenOf(t, client, base+"login")},
		"username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path == "/login" {
		t.Fatalf("log in as %s: %d at %s\n%s", username, resp.StatusCode, resp.Request.URL, page)
	}
	return string(page), client
}

// csrfTokenOf is the CSRF token of the form on the page at pageURL, as client sees it.
func csrfTokenOf(t *testing.T, client *http.Client, pageURL string) string {
	t.Helper()
	resp, err := client.Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf_token" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on %s:\n%s", pageURL, page)
	}
	return string(m[1])
}

func TestServeFirstStartRestartAndUserAdd(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"SHOAL_DATA_DIR": data, "SHOAL_LOG_LEVEL": "warn"}
	base, out, stop := startServe(t, env, "--addr", "127.0.0.1:0")

	if code, body := get(t, base+"healthz"); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Fatalf("GET /healthz = %d %s", code, body)
	}
	pw := regexp.MustCompile(`Created the first user: admin, password (\S+) `).FindStringSubmatch(out.String())
	if pw == nil {
		t.Fatalf("the first start did not print the admin password:\n%s", out)
	}
	// The printed password logs the admin in to the web UI.
	if page, _ := webLogin(t, base, "admin", pw[1]); !strings.Contains(page, `class="user-name">admin<`) {
		t.Errorf("after logging in as admin the page does not show the admin:\n%s", page)
	}

	// The embedded database is locked while the server runs.
	var addOut bytes.Buffer
	err := run(context.Background(), []string{"user", "add", "--username", "bob", "--password", "pw"}, envOf(env), &addOut, io.Discard)
	if !errors.Is(err, embedded.ErrDatabaseInUse) || !strings.Contains(err.Error(), "stop that server first") {
		t.Fatalf("user add while serving: %v, want a clear in-use error", err)
	}

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown", err)
	}
	// The password and the credit come from the environment, the rest from flags; a flag wins
	// over its variable.
	addEnv := map[string]string{"SHOAL_USER_PASSWORD": "pw", "SHOAL_USER_CPU_HOURS": "1500", "SHOAL_USER_MACHINE_LIMIT": "9"}
	for k, v := range env {
		addEnv[k] = v
	}
	err = run(context.Background(), []string{"user", "add", "--username", "bob",
		"--approver", "--machine-limit", "4", "--email", "bob@example.org"}, envOf(addEnv), &addOut, io.Discard)
	if err != nil {
		t.Fatalf("user add after stop: %v", err)
	}
	if !strings.Contains(addOut.String(), "Created approver bob") {
		t.Errorf("user add printed %q", addOut.String())
	}
	// An operator makes another user an approver and raises the machine limit.
	if err := run(context.Background(), []string{"user", "add", "--username", "carol", "--password", "pw"}, envOf(env), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	var setOut bytes.Buffer
	err = run(context.Background(), []string{"user", "set", "--username", "carol", "--approver=true", "--machine-limit", "7"},
		envOf(env), &setOut, io.Discard)
	if err != nil {
		t.Fatalf("user set: %v", err)
	}
	if got := setOut.String(); got != "carol is now an approver (machine limit 7).\n" {
		t.Errorf("user set printed %q", got)
	}
	err = run(context.Background(), []string{"user", "set", "--username", "nobody", "--approver"}, envOf(env), io.Discard, io.Discard)
	if !errors.Is(err, rundb.ErrNotFound) || !strings.Contains(err.Error(), "user set: nobody") {
		t.Errorf("user set of an unknown user: %v, want not found, naming the user", err)
	}

	// A network known without a file here, for nn_url below.
	const net = "nn-0123456789ab.nnue"
	ndb, err := rundb.Open(context.Background(), rundb.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := ndb.NNs.Insert(context.Background(), &rundb.NN{Name: net}); err != nil {
		t.Fatal(err)
	}
	if carol, err := ndb.Users.Get(context.Background(), "carol"); err != nil || !carol.IsApprover() || carol.EffectiveMachineLimit() != 7 {
		t.Errorf("carol after user set: %+v (%v), want an approver with machine limit 7", carol, err)
	}
	if err := ndb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Restart: nothing is lost, and no second admin password appears.
	base, out, stop = startServe(t, env, "--addr", "127.0.0.1:0", "--nn-url", "https://nets.example.org/")
	if strings.Contains(out.String(), "Created the first user") {
		t.Error("a restart created the admin again")
	}
	if code, body := get(t, base); code != http.StatusOK || !strings.Contains(body, "<h1>Tests") {
		t.Errorf("after a restart GET / = %d, want 200 with the tests page:\n%s", code, body)
	}
	// nn_url sends a client to where the networks' files are.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.Get(base + "api/nn/" + net); err != nil {
		t.Error(err)
	} else {
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || loc != "https://nets.example.org/nn/"+net {
			t.Errorf("GET /api/nn/%s with nn_url = %d to %q, want 302 to the nn_url", net, resp.StatusCode, loc)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	db := openStopped(t, data)
	ctx := context.Background()
	if _, err := db.Users.Authenticate(ctx, "admin", pw[1]); err != nil {
		t.Errorf("admin with the printed password: %v", err)
	}
	bob, err := db.Users.Authenticate(ctx, "bob", "pw")
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	if !bob.IsApprover() || bob.EffectiveMachineLimit() != 4 || bob.Email != "bob@example.org" || bob.Pending {
		t.Errorf("bob = %+v", bob)
	}
	if st, err := db.UserCache.Get(ctx, "bob"); err != nil || st.CPUHours != 1500 {
		t.Errorf("bob's cpu hours = %+v, %v", st, err)
	}
	events, err := db.Actions.Find(ctx, rundb.ActionFilter{Action: "system_event"}, 10)
	if err != nil || len(events) != 4 {
		t.Errorf("system events = %d (%v), want start and stop twice", len(events), err)
	}
}

func TestServeUsesAdminPasswordFromEnvironment(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"SHOAL_DATA_DIR": data, "SHOAL_ADMIN_PASSWORD": "chosen-one", "SHOAL_LOG_LEVEL": "warn"}
	_, out, stop := startServe(t, env, "--addr", "127.0.0.1:0")
	if !strings.Contains(out.String(), "with the password from SHOAL_ADMIN_PASSWORD") || strings.Contains(out.String(), "chosen-one") {
		t.Errorf("output should name the variable and not echo the password:\n%s", out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	db := openStopped(t, data)
	if u, err := db.Users.Authenticate(context.Background(), "admin", "chosen-one"); err != nil || !u.IsApprover() {
		t.Errorf("admin = %+v, %v", u, err)
	}
}

func TestInvalidConfigStopsBeforeAnythingStarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"a negative pool size flag", []string{"serve", "--threadpool-tokens", "-3"}, nil,
			[]string{"threadpool_tokens", `"-3"`, "--threadpool-tokens"}},
		{"a bad address in the environment", []string{"serve"}, map[string]string{"SHOAL_ADDR": "localhost"},
			[]string{"addr", `"localhost"`, "SHOAL_ADDR"}},
		{"an unknown key in the file", []string{"serve", "--config", "CONFIG"}, nil,
			[]string{`unknown key "threadpool_token"`}},
		{"user add without a password", []string{"user", "add", "--username", "bob"}, nil,
			[]string{"--password is required"}},
		{"user add with a negative cpu-hours", []string{"user", "add", "--username", "bob", "--password", "x", "--cpu-hours", "-1"}, nil,
			[]string{"--cpu-hours", "-1"}},
		{"user add with a serve-only flag", []string{"user", "add", "--addr", "127.0.0.1:1"}, nil,
			[]string{"flag provided but not defined: -addr"}},
		{"an unknown command", []string{"frobnicate"}, nil, []string{`unknown command "frobnicate"`}},
		{"user set without a change", []string{"user", "set", "--username", "bob"}, nil, []string{"nothing to change"}},
		{"user set with a machine limit of 0", []string{"user", "set", "--username", "bob", "--machine-limit", "0"}, nil,
			[]string{"--machine-limit", "at least 1"}},
		{"user add with a bad cpu-hours in the environment", []string{"user", "add", "--username", "bob", "--password", "x"},
			map[string]string{"SHOAL_USER_CPU_HOURS": "lots"}, []string{"SHOAL_USER_CPU_HOURS", `"lots"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			cfgFile := filepath.Join(dir, "shoal.toml")
			if err := os.WriteFile(cfgFile, []byte("threadpool_token = 5\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"SHOAL_DATA_DIR": data}
			for k, v := range tc.env {
				env[k] = v
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "CONFIG", cfgFile)
			}
			var out bytes.Buffer
			err := run(context.Background(), args, envOf(env), &out, io.Discard)
			if err == nil {
				t.Fatal("run succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
			if _, statErr := os.Stat(data); !os.IsNotExist(statErr) {
				t.Error("the data directory was created although the configuration was invalid")
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, envOf(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(&out).ReadString('\n')
	if !strings.HasPrefix(line, "shoal "+version+" (go") {
		t.Errorf("version printed %q", line)
	}
}

// The embedded database runs in a process of its own, which the server starts and stops; if it
// dies, the server stops with an error instead of serving without a database, and starts again
// on the same data.
func TestServeRunsItsDatabaseInAProcess(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"SHOAL_DATA_DIR": data, "SHOAL_LOG_LEVEL": "info"}
	_, out, stop := startServe(t, env, "--addr", "127.0.0.1:0")
	// The server collects garbage half as often as Go's default (serveGCPercent) unless the
	// environment sets GOGC. Reading the setting sets it; to what it already was if it is right.
	if os.Getenv("GOGC") == "" {
		if p := debug.SetGCPercent(serveGCPercent); p != serveGCPercent {
			t.Errorf("the serving process collects at GOGC %d, want %d", p, serveGCPercent)
		}
	}
	dbPid := func(out string) int {
		t.Helper()
		m := regexp.MustCompile(`SQLite; process (\d+)\)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("the start-up log does not name the database's process:\n%s", out)
		}
		pid, _ := strconv.Atoi(m[1])
		return pid
	}
	pid := dbPid(out.String())
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("the database's process %d: %v", pid, err)
	}
	// statFields are a /proc stat line's fields after the command name: state, parent, ...
	statFields := func(stat []byte) []string { return strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:])) }
	if f := statFields(stat); f[1] != strconv.Itoa(os.Getpid()) {
		t.Errorf("the database's process has parent %s, want this server (%d)", f[1], os.Getpid())
	}
	// It yields the processor to the server: every one of its threads is niced, where the
	// server's main thread is not (the one thread that started it and waits for it is); and it
	// collects garbage less often than Go's default.
	nices := func(glob string) map[string]bool {
		t.Helper()
		stats, _ := filepath.Glob(glob)
		seen := map[string]bool{}
		for _, p := range stats {
			if st, err := os.ReadFile(p); err == nil {
				seen[statFields(st)[16]] = true
			}
		}
		return seen
	}
	if server := nices("/proc/self/stat"); len(server) != 1 || !server["0"] {
		t.Logf("the server runs at nice %v, not 0: the database's nice is not checked", server)
	} else if got := nices(fmt.Sprintf("/proc/%d/task/*/stat", pid)); len(got) != 1 || !got["10"] {
		t.Errorf("the database's threads have nice values %v, want 10 alone (the server's are 0)", got)
	}
	if environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && os.Getenv("GOGC") == "" &&
		!bytes.Contains(environ, []byte("\x00GOGC=400\x00")) {
		t.Errorf("the database's environment has no GOGC=400")
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "the database is gone") {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not notice its database die:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("serve returned %v after its database died, want the database's exit", err)
	}

	// Again on the same data; a clean stop ends the database's process too.
	_, out, stop = startServe(t, env, "--addr", "127.0.0.1:0")
	pid = dbPid(out.String())
	if strings.Contains(out.String(), "Created the first user") {
		t.Errorf("the restart did not find the first start's data:\n%s", out)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the database's process %d is still there after the server stopped: %v", pid, err)
	}
}
