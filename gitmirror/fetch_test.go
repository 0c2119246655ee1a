package gitmirror

import (
	"encoding/pem"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// gitHTTPServer serves the bare repositories under root over TLS with git-http-backend and
// returns it with a CA file trusting it. The test is skipped when git-http-backend is missing.
func gitHTTPServer(t *testing.T, root string) (*httptest.Server, string) {
	t.Helper()
	backend := filepath.Join(gitT(t, root, "--exec-path"), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("no git-http-backend: %v", err)
	}
	srv := httptest.NewTLSServer(&cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"HOME=" + root,
		},
	})
	t.Cleanup(srv.Close)
	return srv, writeCA(t, srv)
}

// writeCA writes the certificate of a test TLS server to a PEM file.
func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

// servedUpstream is an upstream with one commit, cloned bare under a directory to serve.
func servedUpstream(t *testing.T) (root, sha string) {
	t.Helper()
	up := newUpstream(t)
	up.write("src/main.cpp", "int main() {}\n")
	sha = up.commit("served\n\nBench: 2345678")
	root = t.TempDir()
	gitT(t, root, "clone", "-q", "--bare", up.dir, filepath.Join(root, "engine.git"))
	return root, sha
}

func TestFetchOverHTTPS(t *testing.T) {
	root, sha := servedUpstream(t)
	srv, ca := gitHTTPServer(t, root)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}, CAFile: ca})
	c, err := m.Resolve(testCtx(t), srv.URL+"/engine.git", "master")
	if err != nil {
		t.Fatalf("Resolve over https: %v", err)
	}
	if c.SHA != sha || c.Bench != "2345678" {
		t.Errorf("Resolve = %s bench %q, want %s bench 2345678", c.SHA, c.Bench, sha)
	}
}

func TestFetchRefusesRedirects(t *testing.T) {
	root, _ := servedUpstream(t)
	srv, ca := gitHTTPServer(t, root)
	redirect := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, srv.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/", redirect.URL + "/"}, CAFile: ca})
	_, err := m.Resolve(testCtx(t), redirect.URL+"/engine.git", "master")
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve through a redirect: %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "302") {
		t.Errorf("error %q does not say the server redirected", err)
	}
}

func TestFetchRefusesAnUntrustedCertificate(t *testing.T) {
	root, _ := servedUpstream(t)
	srv, _ := gitHTTPServer(t, root)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}})
	if _, err := m.Resolve(testCtx(t), srv.URL+"/engine.git", "master"); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve from a server not trusted: %v, want ErrUnreachable", err)
	}
}

// hangingServer accepts requests and answers none until the client goes away; it counts the
// requests in progress.
type hangingServer struct {
	*httptest.Server
	mu           sync.Mutex
	active, peak int
	started      chan struct{}
}

func newHangingServer(t *testing.T) (*hangingServer, string) {
	h := &hangingServer{started: make(chan struct{}, 100)}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.active++
		h.peak = max(h.peak, h.active)
		h.mu.Unlock()
		h.started <- struct{}{}
		<-r.Context().Done()
		h.mu.Lock()
		h.active--
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h, writeCA(t, h.Server)
}

func TestFetchTimeout(t *testing.T) {
	srv, ca := newHangingServer(t)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}, CAFile: ca, FetchTimeout: 500 * time.Millisecond})
	start := time.Now()
	_, err := m.Resolve(testCtx(t), srv.URL+"/slow.git", "master")
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("Resolve from a server that never answers: %v, want ErrUnreachable saying it timed out", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v for a timeout of 500ms", d)
	}
}

func TestCloseEndsFetches(t *testing.T) {
	srv, ca := newHangingServer(t)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}, CAFile: ca})
	errc := make(chan error, 1)
	go func() {
		_, err := m.Resolve(testCtx(t), srv.URL+"/slow.git", "master")
		errc <- err
	}()
	<-srv.started
	start := time.Now()
	m.Close()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-errc; err == nil {
		t.Error("Resolve during Close succeeded")
	}
}

func TestAtMostTwoFetchesAtOnce(t *testing.T) {
	srv, ca := newHangingServer(t)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}, CAFile: ca})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			m.Resolve(testCtx(t), srv.URL+"/repo"+string(rune('a'+i))+".git", "master")
		})
	}
	<-srv.started
	<-srv.started
	time.Sleep(300 * time.Millisecond) // time for a third fetch to start, were it allowed
	srv.mu.Lock()
	peak := srv.peak
	srv.mu.Unlock()
	m.Close()
	wg.Wait()
	if peak != 2 {
		t.Errorf("%d fetches at once, want 2", peak)
	}
}

// smallUpstream is an upstream with one small commit.
func smallUpstream(t *testing.T) *upstream {
	up := newUpstream(t)
	up.write("small", "small\n")
	up.commit("small")
	return up
}

// addNoise commits size bytes of incompressible data, the same for a seed.
func addNoise(t *testing.T, up *upstream, name string, size int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	up.write(name, string(b))
	up.commit("noise " + name)
}

func TestMaxBytes(t *testing.T) {
	t.Run("a first fetch too large leaves nothing", func(t *testing.T) {
		up := smallUpstream(t)
		addNoise(t, up, "noise.bin", 3<<20, 1)
		m := newTestMirrors(t, Config{Allowed: []string{up.dir}, MaxBytes: 300 << 10})
		m.pollEvery = time.Millisecond
		_, err := m.Resolve(testCtx(t), up.dir, "master")
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Resolve: %v, want ErrTooLarge", err)
		}
		entries, _ := os.ReadDir(m.cfg.Dir)
		for _, e := range entries {
			if e.Name() != ".home" && e.Name() != "archives" && e.Name() != lockFile {
				t.Errorf("left %s behind", e.Name())
			}
		}
	})
	t.Run("an existing mirror keeps what it had", func(t *testing.T) {
		up := smallUpstream(t)
		small := up.git("rev-parse", "HEAD")
		m := newTestMirrors(t, Config{Allowed: []string{up.dir}, MaxBytes: 300 << 10})
		m.pollEvery = time.Millisecond
		clock := &fakeClock{now: time.Unix(1800000000, 0)}
		m.now = clock.Now
		ctx := testCtx(t)
		if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
			t.Fatal(err)
		}
		addNoise(t, up, "noise.bin", 3<<20, 2)
		clock.advance(2 * time.Minute)
		if _, err := m.Resolve(ctx, up.dir, "master"); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Resolve: %v, want ErrTooLarge", err)
		}
		st, _ := m.repo(up.dir)
		filepath.WalkDir(st.dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && (strings.HasPrefix(d.Name(), "tmp_") || strings.HasSuffix(d.Name(), ".lock")) {
				t.Errorf("left %s behind", p)
			}
			return nil
		})
		if _, err := m.Resolve(ctx, up.dir, small); err != nil {
			t.Errorf("Resolve of what the mirror had: %v", err)
		}
	})
}

// A shallow upstream (Stockfish 11's fixture is one) is mirrored whole: its branches end at its
// shallow root, and a diff across them works.
func TestFetchFromAShallowUpstream(t *testing.T) {
	up := newUpstream(t)
	up.write("src/search.cpp", "int a;\n")
	up.commit("root")
	up.write("src/search.cpp", "int a;\nint b;\n")
	base := up.commit("base\n\nBench: 1")
	up.git("checkout", "-q", "-b", "patch")
	up.write("src/search.cpp", "int a;\nint b;\nint c;\n")
	patch := up.commit("patch\n\nBench: 2")
	up.git("checkout", "-q", "master")
	shallow := filepath.Join(t.TempDir(), "shallow.git")
	gitT(t, up.dir, "clone", "-q", "--bare", "--no-local", "--depth", "2", "--no-single-branch", up.dir, shallow)
	if _, err := os.Stat(filepath.Join(shallow, "shallow")); err != nil {
		t.Fatalf("the clone is not shallow: %v", err)
	}
	m := newTestMirrors(t, Config{Allowed: []string{shallow}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	for ref, want := range map[string]string{"master": base, "patch": patch} {
		c, err := m.Resolve(testCtx(t), shallow, ref)
		if err != nil || c.SHA != want {
			t.Fatalf("Resolve(%s) = %s, %v; want %s", ref, c.SHA, err, want)
		}
	}
	d, err := m.Diff(testCtx(t), shallow, base, patch)
	if err != nil || len(d.Files) != 1 || d.Files[0].Added != 1 || d.Files[0].Removed != 0 {
		t.Fatalf("Diff = %+v, %v; want src/search.cpp +1 -0", d, err)
	}
	// A later fetch from it works too.
	next := gitT(t, shallow, "commit-tree", "-p", patch, "-m", "next", patch+"^{tree}")
	gitT(t, shallow, "update-ref", "refs/heads/patch", next)
	clock.advance(2 * time.Minute)
	if c, err := m.Resolve(testCtx(t), shallow, "patch"); err != nil || c.SHA != next {
		t.Fatalf("Resolve(patch) after it moved = %s, %v; want %s", c.SHA, err, next)
	}
}
