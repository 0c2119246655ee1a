// Package buildtest serves a building worker's files in tests: a small git repository archived
// as a server archives a commit, a Stockfish-like Makefile whose engine is the test binary
// itself (the fake UCI engine), an http.Handler for the file contract (sources, networks,
// books) and a build.Server over HTTP.
package buildtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

// Archive makes a git repository of files (path -> content; a path ending in ".sh" is made
// executable) in a temporary directory, commits them and returns the commit's SHA and its
// `git archive --format=tar.gz`, the tree at the archive's root. The test is skipped when git
// is not installed.
func Archive(tb testing.TB, files map[string]string) (sha string, tgz []byte) {
	tb.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		tb.Skip("git is not installed")
	}
	dir := tb.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			tb.Fatal(err)
		}
	}
	Git(tb, dir, "init", "-q")
	Git(tb, dir, "add", "-A")
	Git(tb, dir, "commit", "-q", "-m", "a small engine")
	sha = strings.TrimSpace(string(Git(tb, dir, "rev-parse", "HEAD")))
	return sha, Git(tb, dir, "archive", "--format=tar.gz", sha)
}

// Git runs git in dir, away from the machine's and the user's configuration, and returns its
// output.
func Git(tb testing.TB, dir string, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=Shoal", "GIT_AUTHOR_EMAIL=shoal@example.org",
		"GIT_COMMITTER_NAME=Shoal", "GIT_COMMITTER_EMAIL=shoal@example.org")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// Archs is a Stockfish-like list of ARCHes for Makefile: some x86 ones and the generic ones,
// so that a machine of any kind finds one it runs.
var Archs = []string{"x86-64-bmi2", "x86-64-modern", "x86-64", "armv8", "general-64"}

// Engine is the files of a small engine of the test's own: src/Makefile, whose help target
// lists archs as Stockfish's does and whose build target runs recipe (shell lines, may be
// empty) and then makes src/stockfish, a script that runs the test binary as the fake UCI
// engine (its TestMain calls fakeuci.ServeIfAsked); src/engine.sh is that script. Add
// src/evaluate.h and more to the map as a test needs.
func Engine(tb testing.TB, archs []string, recipe ...string) map[string]string {
	tb.Helper()
	bin, err := filepath.Abs(os.Args[0])
	if err != nil {
		tb.Fatal(err)
	}
	var mk strings.Builder
	mk.WriteString(".PHONY: help build\n\nhelp:\n\t@echo \"\"\n\t@echo \"To compile stockfish, type: \"\n\t@echo \"\"\n")
	mk.WriteString("\t@echo \"Supported archs:\"\n\t@echo \"\"\n")
	for _, a := range archs {
		fmt.Fprintf(&mk, "\t@echo \"%-23s > an arch\"\n", a)
	}
	mk.WriteString("\t@echo \"\"\n\t@echo \"Supported compilers:\"\n\t@echo \"\"\n\t@echo \"gcc                     > Gnu compiler (default)\"\n\n")
	mk.WriteString("build:\n")
	for _, line := range recipe {
		mk.WriteString("\t" + line + "\n")
	}
	mk.WriteString("\t@echo \"building ARCH=$(ARCH)\"\n\tcp engine.sh stockfish\n\tchmod +x stockfish\n")
	return map[string]string{
		"src/Makefile": mk.String(),
		// Under the race detector a process waits a second at its exit (GORACE's
		// atexit_sleep_ms), which each bench of the engine would pay.
		"src/engine.sh": fmt.Sprintf("#!/bin/sh\nexport %s=1\nexport GORACE=\"${GORACE:-atexit_sleep_ms=0}\"\nexec '%s' \"$@\"\n", fakeuci.TestEnv, bin),
		"README.md":     "A small engine for tests.\n",
	}
}

// Files is the server's side of the file contract, an http.Handler: POST protocol.SourcePath
// answers with the archive of a commit added by AddSource (and its sha256 header), GET
// /api/nn/{name} redirects to the network's file, GET protocol.BooksPath{name} answers with a
// book. An unknown name is a 404 in the worker API's error shape. It counts the requests. It is
// safe for concurrent use.
type Files struct {
	mu          sync.Mutex
	sources     map[string][]byte
	nets        map[string][]byte
	books       map[string][]byte
	wrongSHA256 bool
	requests    map[string]int
}

// NewFiles returns a Files that holds nothing yet.
func NewFiles() *Files {
	return &Files{sources: map[string][]byte{}, nets: map[string][]byte{}, books: map[string][]byte{}, requests: map[string]int{}}
}

// AddSource serves tgz as the source of the commit sha.
func (f *Files) AddSource(sha string, tgz []byte) { f.mu.Lock(); f.sources[sha] = tgz; f.mu.Unlock() }

// AddNet serves data as the network name.
func (f *Files) AddNet(name string, data []byte) { f.mu.Lock(); f.nets[name] = data; f.mu.Unlock() }

// AddBook serves data as the book name.
func (f *Files) AddBook(name string, data []byte) { f.mu.Lock(); f.books[name] = data; f.mu.Unlock() }

// SetWrongSHA256 makes the sources' sha256 header lie.
func (f *Files) SetWrongSHA256(wrong bool) { f.mu.Lock(); f.wrongSHA256 = wrong; f.mu.Unlock() }

// Requests counts the requests of a kind so far: "source", "nn" or "books".
func (f *Files) Requests(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[kind]
}

// Handles reports whether path is one of the contract's, for a server that serves more.
func Handles(path string) bool {
	return path == protocol.SourcePath || strings.HasPrefix(path, "/api/nn/") ||
		strings.HasPrefix(path, protocol.BooksPath) || strings.HasPrefix(path, "/files/nn/")
}

func (f *Files) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch p := r.URL.Path; {
	case p == protocol.SourcePath && r.Method == http.MethodPost:
		f.requests["source"]++
		var req protocol.SourceRequest
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || req.Password == "" || req.WorkerInfo.Username == "" {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("%s: invalid request (%v)", p, err))
			return
		}
		tgz, ok := f.sources[req.SHA]
		if !ok {
			apiError(w, http.StatusNotFound, fmt.Sprintf("%s: commit %s is not an active run's", p, req.SHA))
			return
		}
		sum := protocol.SHA256Hex(tgz)
		if f.wrongSHA256 {
			sum = protocol.SHA256Hex(append([]byte("not "), tgz...))
		}
		w.Header().Set(protocol.SourceSHA256Header, sum)
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(tgz)
	case strings.HasPrefix(p, "/api/nn/") && r.Method == http.MethodGet:
		f.requests["nn"]++
		name := strings.TrimPrefix(p, "/api/nn/")
		if _, ok := f.nets[name]; !ok {
			apiError(w, http.StatusNotFound, p+": no such network")
			return
		}
		// As a server with an nn_url does: the file is elsewhere.
		http.Redirect(w, r, "/files/nn/"+name, http.StatusFound)
	case strings.HasPrefix(p, "/files/nn/") && r.Method == http.MethodGet:
		data, ok := f.nets[strings.TrimPrefix(p, "/files/nn/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	case strings.HasPrefix(p, protocol.BooksPath) && r.Method == http.MethodGet:
		f.requests["books"]++
		data, ok := f.books[strings.TrimPrefix(p, protocol.BooksPath)]
		if !ok {
			apiError(w, http.StatusNotFound, p+": no such book")
			return
		}
		_, _ = w.Write(data)
	default:
		apiError(w, http.StatusNotFound, r.Method+" "+p+": not found")
	}
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg, "duration": 0.001})
}

// Client is a build.Server over HTTP for tests: the server at URL, the account "alice".
type Client struct {
	URL  string
	HTTP *http.Client // nil: http.DefaultClient
}

// Fetch implements build.Server.
func (c *Client) Fetch(ctx context.Context, path string, body any) (*http.Response, error) {
	method, reader := http.MethodGet, (*bytes.Reader)(nil)
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		method, reader = http.MethodPost, bytes.NewReader(data)
	}
	var req *http.Request
	var err error
	if reader != nil {
		req, err = http.NewRequestWithContext(ctx, method, c.URL+path, reader)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, c.URL+path, nil)
	}
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// SourceRequest implements build.Server.
func (c *Client) SourceRequest(sha string) protocol.SourceRequest {
	return protocol.SourceRequest{Password: "secret", SHA: sha,
		WorkerInfo: protocol.WorkerInfo{Username: "alice", Concurrency: 1, MinThreads: 1, Compiler: "g++", WorkerArch: "unknown"}}
}
