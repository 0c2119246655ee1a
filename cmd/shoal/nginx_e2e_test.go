//go:build !race

// The deployment of configs/nginx.conf: a real nginx running that very file (its ports, TLS
// lines and data directory swapped for the test's) in front of one primary and two secondaries
// sharing the primary's embedded database, a simulated fleet working through nginx, and checks
// of where every request went. It runs in make test's race-free pass. Without nginx it is
// skipped, except in CI (CI set), where .ci/run installs Debian's nginx package and a missing
// nginx is a failure.

package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/bench"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// shippedNginxConf is the production configuration the test runs, relative to cmd/shoal.
const shippedNginxConf = "../../configs/nginx.conf"

// findNginx returns the nginx binary, or skips the test (fails it in CI).
func findNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/sbin/nginx"); err == nil && !fi.IsDir() {
		return "/usr/sbin/nginx" // Debian's, not on a normal user's PATH
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no nginx on PATH or at /usr/sbin/nginx: .ci/run installs Debian's nginx package")
	}
	t.Skip("no nginx on PATH or at /usr/sbin/nginx (Debian: apt-get install nginx); the nginx test needs it")
	return ""
}

// nginxPorts are the test's replacements for the shipped file's addresses.
type nginxPorts struct {
	primary, secondary1, secondary2 string // instances' HOST:PORT, for 127.0.0.1:8000, 8001, 8002
	standby                         string // for 127.0.0.1:8003
	https, http                     int    // loopback ports for the 443 and 80 servers
	nnDir                           string // for /var/lib/shoal/nn/
}

// rewriteNginxConf turns the shipped configuration into the test's: comments dropped, the
// instances' addresses and the listening ports replaced, TLS and IPv6 lines dropped (the test
// speaks plain HTTP on loopback), the networks' directory moved. Every rule must apply as
// often as the shipped file needs it, so that a change to the file that the rewrite does not
// follow fails here rather than leaving a part of the file untested.
func rewriteNginxConf(conf string, p nginxPorts) (string, error) {
	type rule struct {
		match   func(line string) bool
		rewrite func(line string) string // nil: drop the line
		want    int
		n       int
	}
	has := func(s string) func(string) bool { return func(l string) bool { return strings.Contains(l, s) } }
	replace := func(old, new string) func(string) string {
		return func(l string) string { return strings.ReplaceAll(l, old, new) }
	}
	rules := map[string]*rule{
		"the primary's address":           {match: has("127.0.0.1:8000"), rewrite: replace("127.0.0.1:8000", p.primary), want: 3},
		"the first secondary's address":   {match: has("127.0.0.1:8001"), rewrite: replace("127.0.0.1:8001", p.secondary1), want: 1},
		"the second secondary's address":  {match: has("127.0.0.1:8002"), rewrite: replace("127.0.0.1:8002", p.secondary2), want: 1},
		"the standby's address":           {match: has("127.0.0.1:8003"), rewrite: replace("127.0.0.1:8003", p.standby), want: 3},
		"listen 443 ssl http2;":           {match: func(l string) bool { return l == "listen 443 ssl http2;" }, rewrite: func(string) string { return fmt.Sprintf("listen 127.0.0.1:%d;", p.https) }, want: 1},
		"listen 80;":                      {match: func(l string) bool { return l == "listen 80;" }, rewrite: func(string) string { return fmt.Sprintf("listen 127.0.0.1:%d;", p.http) }, want: 1},
		"listen [::]:... (dropped)":       {match: func(l string) bool { return strings.HasPrefix(l, "listen [::]:") }, want: 2},
		"ssl_... (dropped)":               {match: func(l string) bool { return strings.HasPrefix(l, "ssl_") }, want: 3},
		"the networks' directory (alias)": {match: has("/var/lib/shoal/nn/"), rewrite: replace("/var/lib/shoal/nn/", p.nnDir+"/"), want: 1},
	}
	var out strings.Builder
	for line := range strings.Lines(conf) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		keep := true
		for _, r := range rules {
			if r.match(trimmed) {
				r.n++
				if r.rewrite == nil {
					keep = false
				} else {
					line = r.rewrite(line)
				}
			}
		}
		if keep {
			out.WriteString(line)
		}
	}
	var wrong []string
	for name, r := range rules {
		if r.n != r.want {
			wrong = append(wrong, fmt.Sprintf("%s: %d lines, want %d", name, r.n, r.want))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return "", fmt.Errorf("%s no longer has the lines the test rewrites (update rewriteNginxConf with it): %s",
			shippedNginxConf, strings.Join(wrong, "; "))
	}
	return out.String(), nil
}

// nginxAccessFormat is the access log the test reads: where nginx sent each request.
const nginxAccessFormat = `$upstream_addr|$request_method|$status|$uri`

// nginxMain is the test's nginx.conf: its own pid, logs and temporary files under dir, in the
// foreground, with the shipped file included in its http block as Debian's nginx.conf does.
func nginxMain(dir, site string) string {
	var b strings.Builder
	if os.Geteuid() == 0 {
		// nginx started by root runs its workers as an unprivileged user, which could not read
		// the test's private temporary directory (the networks served from disk).
		b.WriteString("user root;\n")
	}
	fmt.Fprintf(&b, `daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
    worker_connections 1024;
}
http {
    log_format routing '%[3]s';
    access_log %[1]s/access.log routing;
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
    include %[2]s;
}
`, dir, site, nginxAccessFormat)
	return b.String()
}

// freePort returns a loopback port nothing listens on (for the moment).
func freePort(t *testing.T) int {
	t.Helper()
	port, err := bench.LoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// runningNginx is an nginx child process of the test.
type runningNginx struct {
	base      string // http://127.0.0.1:PORT, the 443 server's stand-in
	redirect  string // http://127.0.0.1:PORT, the port-80 server's stand-in
	accessLog string
	errorLog  string
}

// startNginx runs the shipped configuration, rewritten for ports, in front of the instances,
// stopped when the test ends. A port taken between freePort and nginx's bind is retried.
func startNginx(t *testing.T, exe string, p nginxPorts) *runningNginx {
	t.Helper()
	shipped, err := os.ReadFile(shippedNginxConf)
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
			t.Fatal(err)
		}
		p.https, p.http = freePort(t), freePort(t)
		site, err := rewriteNginxConf(string(shipped), p)
		if err != nil {
			t.Fatal(err)
		}
		sitePath, mainPath := filepath.Join(dir, "shoal.conf"), filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(sitePath, []byte(site), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mainPath, []byte(nginxMain(dir, sitePath)), 0o600); err != nil {
			t.Fatal(err)
		}
		n := &runningNginx{base: fmt.Sprintf("http://127.0.0.1:%d", p.https), redirect: fmt.Sprintf("http://127.0.0.1:%d", p.http),
			accessLog: filepath.Join(dir, "access.log"), errorLog: filepath.Join(dir, "error.log")}
		// -e: the error log before the configuration is read (nginx 1.19.5+), so that nothing is
		// written under /var/log/nginx.
		cmd := exec.Command(exe, "-p", dir, "-e", n.errorLog, "-c", mainPath)
		var output lockedBuffer
		cmd.Stdout, cmd.Stderr = &output, &output
		if err := cmd.Start(); err != nil {
			t.Fatalf("start nginx: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful: finish open requests
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		ready, why := n.waitReady(exited, &output)
		if ready {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					errs, _ := os.ReadFile(n.errorLog)
					t.Logf("nginx error log:\n%s%s", errs, &output)
				}
			})
			return n
		}
		stop()
		if strings.Contains(why, "Address already in use") && attempt < 3 {
			continue
		}
		t.Fatalf("nginx did not start: %s\nits configuration:\n%s", why, site)
	}
}

// waitReady waits until nginx answers /healthz through the shipped routing, or says why not.
func (n *runningNginx) waitReady(exited <-chan error, output *lockedBuffer) (bool, string) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			errs, _ := os.ReadFile(n.errorLog)
			return false, fmt.Sprintf("exited (%v): %s%s", err, errs, output)
		default:
		}
		if resp, err := http.Get(n.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	errs, _ := os.ReadFile(n.errorLog)
	return false, fmt.Sprintf("no answer on %s/healthz after 15 s: %s%s", n.base, errs, output)
}

// nginxLogLine is one request of the access log.
type nginxLogLine struct {
	upstream, method, status, uri string
}

func (n *runningNginx) readAccessLog(t *testing.T) []nginxLogLine {
	t.Helper()
	data, err := os.ReadFile(n.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	var lines []nginxLogLine
	for line := range strings.Lines(string(data)) {
		f := strings.SplitN(strings.TrimRight(line, "\n"), "|", 4)
		if len(f) != 4 {
			t.Fatalf("access log line %q is not %s", line, nginxAccessFormat)
		}
		lines = append(lines, nginxLogLine{upstream: f[0], method: f[1], status: f[2], uri: f[3]})
	}
	return lines
}

// workerPaths are the worker API calls only the primary answers.
var workerPaths = []string{"/api/request_version", "/api/request_task", "/api/update_task", "/api/beat",
	"/api/request_spsa", "/api/failed_task", "/api/stop_run", "/api/worker_log"}

// The shipped nginx configuration sends every worker call to the primary (nginx's access log
// says where each went; the fleet sees no 503), PGN uploads and read-heavy pages to the
// secondaries (each reply's X-Shoal-Instance says who answered), and a secondary reads the
// games the fleet played through it once the primary has written them.
func TestE2ENginxRoutesWorkersToThePrimaryAndPagesToSecondaries(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	exe := findNginx(t)
	started := time.Now()

	// One primary on an embedded database and two secondaries on it, sharing its data directory
	// (the session secret and the networks), as configs/nginx.conf's header describes.
	dir := t.TempDir()
	log := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instances' log:\n%s", log)
		}
	})
	pcfg := testConfig(dir, e2eScale)
	primary := startTestInstance(t, pcfg, log)
	scfg := pcfg
	scfg.Role, scfg.MongoURI = "secondary", primary.DB().URI()
	secondary1, secondary2 := startTestInstance(t, scfg, log), startTestInstance(t, scfg, log)
	// The standby shares the primary's routes: nginx tries it for them too, and it sends each
	// on with a 503.
	bcfg := scfg
	bcfg.Role = "standby"
	standby := startTestInstance(t, bcfg, log)
	names := map[string]string{primary.Addr(): "primary", secondary1.Addr(): "secondary 8001",
		secondary2.Addr(): "secondary 8002", standby.Addr(): "standby", "-": "nginx itself"}
	instanceOf := func(hdr string) string {
		_, addr, _ := strings.Cut(hdr, "@")
		if name, ok := names[addr]; ok {
			return name
		}
		return "no instance (" + hdr + ")"
	}

	ctx := context.Background()
	const workers = 12
	users, err := demo.CreateUsers(ctx, primary.DB(), workers)
	if err != nil {
		t.Fatal(err)
	}
	// A network the database knows, stored as Shoal stores an upload: DATA_DIR/nn/{name}.gz.
	netData := bytes.Repeat([]byte("a small NNUE stand-in\n"), 100)
	sum := sha256.Sum256(netData)
	netName := "nn-" + hex.EncodeToString(sum[:])[:12] + ".nnue"
	writeGzip(t, filepath.Join(dir, "nn", netName+".gz"), netData)
	if err := primary.DB().NNs.Insert(ctx, &rundb.NN{Name: netName, User: users.Submitter.Name}); err != nil {
		t.Fatal(err)
	}

	ngx := startNginx(t, exe, nginxPorts{primary: primary.Addr(), secondary1: secondary1.Addr(),
		secondary2: secondary2.Addr(), standby: standby.Addr(), nnDir: filepath.Join(dir, "nn")})
	t.Logf("nginx on %s in front of the primary %s and secondaries %s, %s (ready after %v)", ngx.base,
		primary.Addr(), secondary1.Addr(), secondary2.Addr(), time.Since(started).Round(10*time.Millisecond))

	// A run submitted and approved through nginx, played by a fleet working through nginx.
	req := demo.RunRequest("played through nginx")
	req.NumGames = 1000
	id, err := demo.SubmitRun(ctx, ngx.base, users, req)
	if err != nil {
		t.Fatal(err)
	}
	fleetCtx, cancelFleet := context.WithCancel(ctx)
	type fleetResult struct {
		rep *fleet.Report
		err error
	}
	fleetDone := make(chan fleetResult, 1)
	var progress lockedBuffer
	fleetStart := time.Now()
	go func() {
		rep, err := fleet.Run(fleetCtx, fleet.Options{
			ServerURL: ngx.base, Username: users.Workers.Name, Password: users.Workers.Password,
			Workers: workers, Concurrency: 2, Elo: 3, DrawRatio: 0.6, Seed: 13, TimeScale: e2eScale,
			UntilFinished: []string{id}, Duration: 60 * time.Second,
			Progress: &progress, ProgressPeriod: 5 * time.Second,
		})
		fleetDone <- fleetResult{rep, err}
	}()
	var fleetRes *fleetResult
	waitFleet := func() fleetResult {
		if fleetRes == nil {
			r := <-fleetDone
			fleetRes = &r
		}
		return *fleetRes
	}
	t.Cleanup(func() { cancelFleet(); waitFleet() }) // before the instances stop

	noRedirect := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// While the fleet plays: the live streams pass each event on at once, the homepage's from
	// a secondary, the run page's from the primary.
	t.Run("live streams", func(t *testing.T) {
		for _, tc := range []struct {
			path, want string
			events     int
		}{
			{"/tests/events", "secondary 8001", 1},
			{"/tests/view/" + id + "/events", "primary", 2}, // the first state, then a change
		} {
			hdr, got, err := readEvents(ngx.base+tc.path, tc.events, 20*time.Second)
			if err != nil {
				t.Errorf("GET %s through nginx: %v", tc.path, err)
				continue
			}
			if who := instanceOf(hdr); who != tc.want || got < tc.events {
				t.Errorf("GET %s through nginx: %d events from the %s, want %d from the %s", tc.path, got, who, tc.events, tc.want)
			}
		}
	})

	// Every route of the map, by the instance it must reach. A POST without a session's CSRF
	// token is refused, but by the instance that matters: a form Shoal's secondaries answer with
	// 503 must reach the primary.
	t.Run("routing table", func(t *testing.T) {
		const s1, s2, p = "secondary 8001", "secondary 8002", "primary"
		for _, tc := range []struct {
			method, path, want string
		}{
			{"GET", "/", s1},
			{"GET", "/tests", s1},
			{"GET", "/login", s1},
			{"POST", "/login", s1},
			{"POST", "/logout", s1},
			{"GET", "/nns", s1},
			{"GET", "/sprt_calc", s1},
			{"GET", "/user_management", s1},
			{"GET", "/healthz", s1},
			{"GET", "/readyz", s1},
			{"GET", "/static/shoal.css", s1},
			{"GET", "/tests/finished", s2},
			{"GET", "/tests/machines", s2},
			{"GET", "/tests/user/" + users.Submitter.Name, s2},
			{"GET", "/contributors", s2},
			{"GET", "/contributors/monthly", s2},
			{"GET", "/actions", s2},
			{"GET", "/api/active_runs", s2},
			{"GET", "/api/finished_runs", s2},
			{"POST", "/api/actions", s2},
			{"GET", "/api/calc_elo?W=10&D=20&L=5", s2},
			{"GET", "/api/nn/" + netName, s2},
			{"GET", "/api/nn/nn-000000000000.nnue", s2},
			{"GET", "/api/pgn/" + id + "-0.pgn", s2},
			{"GET", "/api/run_pgns/" + id + ".pgn.gz", s2},
			{"POST", "/api/upload_pgn", s2},
			{"GET", "/tests/view/" + id, p},
			{"GET", "/tests/tasks/" + id, p},
			{"GET", "/tests/live_elo/" + id, p},
			{"GET", "/tests/stats/" + id, p},
			{"GET", "/tests/run", p},
			{"POST", "/tests/run", p},
			{"POST", "/tests/modify", p},
			{"POST", "/tests/stop", p},
			{"POST", "/tests/approve", p},
			{"POST", "/tests/purge", p},
			{"POST", "/tests/delete", p},
			{"GET", "/api/get_run/" + id, p},
			{"GET", "/api/get_elo/" + id, p},
			{"GET", "/api/get_task/" + id + "/0", p},
			{"GET", "/api/rate_limit", p},
			{"POST", "/api/create_run", p},
			{"POST", "/api/approve_run", p},
			{"POST", "/api/user_stop_run", p},
			{"POST", "/api/modify_run", p},
			{"GET", "/signup", p},
			{"POST", "/signup", p},
			{"GET", "/upload", p},
			{"POST", "/upload", p},
			{"GET", "/user", p},
			{"POST", "/user", p},
			{"GET", "/user/" + users.Submitter.Name, p},
			{"POST", "/user/" + users.Submitter.Name, p},
			{"GET", "/workers/some-worker", p},
			{"POST", "/workers/some-worker", p},
			{"GET", "/admin/tuning", p},
		} {
			var body io.Reader
			if tc.method == "POST" {
				body = strings.NewReader("{}")
			}
			r, _ := http.NewRequest(tc.method, ngx.base+tc.path, body)
			resp, err := noRedirect.Do(r)
			if err != nil {
				t.Errorf("%s %s: %v", tc.method, tc.path, err)
				continue
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			who := instanceOf(resp.Header.Get("X-Shoal-Instance"))
			if who != tc.want || resp.StatusCode >= 500 {
				t.Errorf("%s %s through nginx: %d from the %s, want an answer from the %s\n%.300s", tc.method, tc.path, resp.StatusCode, who, tc.want, data)
			}
			switch tc.path {
			case "/api/nn/" + netName:
				if resp.StatusCode != http.StatusOK || !bytes.Equal(data, netData) {
					t.Errorf("GET /api/nn/%s: %d, %d bytes; want the network (%d bytes)", netName, resp.StatusCode, len(data), len(netData))
				}
			case "/static/shoal.css":
				if cc := resp.Header.Get("Cache-Control"); resp.StatusCode != http.StatusOK || cc != "max-age=3600" {
					t.Errorf("GET /static/shoal.css: %d, Cache-Control %q; want 200 cached for an hour", resp.StatusCode, cc)
				}
			}
		}
	})

	t.Run("served by nginx itself", func(t *testing.T) {
		// A network straight from the data directory: gzipped to a client that takes it,
		// unzipped to one that does not.
		for _, gz := range []bool{true, false} {
			r, _ := http.NewRequest("GET", ngx.base+"/nn/"+netName, nil)
			if gz {
				r.Header.Set("Accept-Encoding", "gzip")
			}
			resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(r)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if gz {
				zr, err := gzip.NewReader(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("GET /nn/%s with gzip: %d, Content-Encoding %q: %v", netName, resp.StatusCode, resp.Header.Get("Content-Encoding"), err)
				}
				data, _ = io.ReadAll(zr)
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(data, netData) || resp.Header.Get("X-Shoal-Instance") != "" {
				t.Errorf("GET /nn/%s (gzip %v): %d, %d bytes, instance %q; want the network from disk", netName, gz, resp.StatusCode, len(data), resp.Header.Get("X-Shoal-Instance"))
			}
		}
		// Metrics are per instance, scraped on their own ports.
		resp, err := noRedirect.Get(ngx.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Shoal-Instance") != "" {
			t.Errorf("GET /metrics through nginx: %d from %q, want nginx's 404", resp.StatusCode, resp.Header.Get("X-Shoal-Instance"))
		}
		// The HTTPS server tells browsers to stay on HTTPS (security finding 14), on errors too.
		for _, path := range []string{"/tests", "/no/such/page"} {
			resp, err := noRedirect.Get(ngx.base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if hsts := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(hsts, "max-age=") {
				t.Errorf("GET %s through nginx (%d): Strict-Transport-Security %q", path, resp.StatusCode, hsts)
			}
		}
		// Plain HTTP redirects to HTTPS.
		resp, err = noRedirect.Get(ngx.redirect + "/tests/view/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusMovedPermanently || loc != "https://127.0.0.1/tests/view/"+id {
			t.Errorf("GET http://.../tests/view/%s: %d to %q, want 301 to https", id, resp.StatusCode, loc)
		}
	})

	// A login on one instance (POST /login goes to 8001) is a login on the others: they share
	// the session secret.
	t.Run("one session across instances", func(t *testing.T) {
		_, client := webLogin(t, ngx.base+"/", users.Submitter.Name, users.Submitter.Password)
		resp, err := client.Get(ngx.base + "/tests/run")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		who := instanceOf(resp.Header.Get("X-Shoal-Instance"))
		if resp.StatusCode != http.StatusOK || who != "primary" || !strings.Contains(string(page), `class="user-name">`+users.Submitter.Name+`<`) {
			t.Errorf("GET /tests/run after logging in: %d from the %s at %s; want the form for %s from the primary",
				resp.StatusCode, who, resp.Request.URL.Path, users.Submitter.Name)
		}
	})

	res := waitFleet()
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	t.Logf("fleet of %d ran %v through nginx: %d games, %d requests, stopped: %s", workers,
		time.Since(fleetStart).Round(100*time.Millisecond), rep.GamesReported, rep.Requests, rep.StoppedBecause)
	t.Cleanup(func() {
		if t.Failed() {
			var text bytes.Buffer
			_ = rep.WriteText(&text)
			t.Logf("progress:\n%s\n%s", &progress, &text)
		}
	})
	checkClean(t, rep)
	if rep.StoppedBecause != "runs finished" || rep.GamesReported != 1000 {
		t.Errorf("the fleet stopped because %q with %d games, want the run of 1000 games finished", rep.StoppedBecause, rep.GamesReported)
	}
	for msg := range rep.AppErrors {
		if strings.Contains(msg, "primary instance required") {
			t.Errorf("a worker call reached a secondary: %q", msg)
		}
	}

	// (a) Every worker call went to the primary, by nginx's own account.
	lines := ngx.readAccessLog(t)
	perInstance, perWorkerPath, uploads, viaStandby := map[string]int{}, map[string]int{}, 0, 0
	for _, l := range lines {
		// nginx lists every server it tried, the one that answered last.
		tried := strings.Split(l.upstream, ", ")
		answered := tried[len(tried)-1]
		perInstance[names[answered]]++
		if slices.Contains(workerPaths, l.uri) {
			perWorkerPath[l.uri]++
			if answered != primary.Addr() || slices.ContainsFunc(tried[:len(tried)-1], func(a string) bool { return a != standby.Addr() }) {
				t.Errorf("%s %s (%s) went to %q, want the primary %s (after the standby, if nginx tried it first)",
					l.method, l.uri, l.status, l.upstream, primary.Addr())
			}
			if len(tried) > 1 {
				viaStandby++
			}
		}
		if l.uri == "/api/upload_pgn" {
			uploads++
			if l.upstream != secondary2.Addr() {
				t.Errorf("POST /api/upload_pgn went to %q, want the secondary %s", l.upstream, secondary2.Addr())
			}
		}
		for _, a := range tried {
			if _, known := names[a]; !known {
				t.Errorf("%s %s went to %q: no single instance", l.method, l.uri, l.upstream)
			}
		}
	}
	for _, path := range []string{"/api/request_version", "/api/request_task", "/api/update_task", "/api/beat"} {
		if perWorkerPath[path] == 0 {
			t.Errorf("nginx logged no %s: the fleet's calls did not go through it", path)
		}
	}
	// Every call the fleet counted went through nginx (which also logs the calls a worker
	// cancelled, so it may count more).
	for name, e := range rep.Endpoints {
		if path := "/api/" + name; slices.Contains(workerPaths, path) && int64(perWorkerPath[path]) < e.Requests {
			t.Errorf("nginx logged %d %s calls, the fleet made %d", perWorkerPath[path], path, e.Requests)
		}
	}
	// The fleet's PGN uploads went to the secondary (one more is the routing table's).
	if fleetUploads := rep.Endpoints["upload_pgn"].Requests; fleetUploads == 0 || int64(uploads) < fleetUploads+1 {
		t.Errorf("nginx sent %d PGN uploads to the secondary, the fleet made %d; want them all there", uploads, fleetUploads)
	}
	t.Logf("requests by instance (nginx's access log): %v; worker calls, all answered by the primary: %v (%d tried the standby first); PGN uploads to secondary 8002: %d",
		perInstance, perWorkerPath, viaStandby, uploads)

	// (c) The results a secondary reads from the database, once the primary has written them,
	// are what the fleet saw accepted.
	if len(rep.Runs) != 1 {
		t.Fatalf("the fleet reports %d runs, want 1", len(rep.Runs))
	}
	want := rep.Runs[0].FleetResults
	deadline := time.Now().Add(20 * time.Second)
	for {
		var r e2eRun
		code := getJSONURL(t, "http://"+secondary1.Addr()+"/api/get_run/"+id, &r)
		if code == http.StatusOK && r.Finished && r.Results == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a secondary reads the run as %d finished %v with %+v, the fleet saw %+v accepted", code, r.Finished, r.Results, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the test took %v", time.Since(started).Round(100*time.Millisecond))
}

// getJSONURL decodes a 200 reply of GET url into out and returns the status.
func getJSONURL(t *testing.T, url string, out any) int {
	t.Helper()
	return doJSON(t, http.MethodGet, url, nil, out)
}

// readEvents opens an event stream and reads until it has n events (or within), returning the
// X-Shoal-Instance header and the events counted.
func readEvents(url string, n int, within time.Duration) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	hdr := resp.Header.Get("X-Shoal-Instance")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		return hdr, 0, fmt.Errorf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for got < n && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			got++
		}
	}
	return hdr, got, nil
}

// writeGzip stores data gzipped at path, readable by nginx's workers.
func writeGzip(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(data)
	_ = zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
