package worker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// BenchmarkPost is one worker call as a fleet's worker makes it, a beat, against a server that
// answers at once (it runs in the same process, so ns/op counts both sides; B/op and allocs/op
// are mostly the worker's, the fleet's garbage).
func BenchmarkPost(b *testing.B) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"duration":0.001,"task_alive":true}`)
	}))
	defer s.Close()
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"client", nil}, {"round_tripper", http.DefaultTransport}} {
		b.Run(bc.name, func(b *testing.B) {
			w, err := New(Config{ServerURL: s.URL, Username: "alice", Password: "secret", Concurrency: 3,
				UniqueKey: NewUniqueKey("ab12"), RoundTripper: bc.rt}, &SimSource{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r, err := w.post(ctx, "beat", w.taskRequest("0123456789abcdef01234567", 3))
				if err != nil || !r.taskAlive(false) {
					b.Fatalf("beat: %v", err)
				}
			}
		})
	}
}

// A worker given a RoundTripper makes every call on it, none through its HTTPClient.
func TestPostThroughARoundTripper(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"duration":0.001,"task_alive":true}`)
	}))
	defer s.Close()
	var through, around atomic.Int32
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		through.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		around.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	w, err := New(Config{ServerURL: s.URL, Username: "alice", Password: "secret", HTTPClient: client, RoundTripper: rt}, &SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r, err := w.post(context.Background(), "beat", w.taskRequest("0123456789abcdef01234567", 3)); err != nil || !r.taskAlive(false) {
			t.Fatalf("beat: %v", err)
		}
	}
	if through.Load() != 3 || around.Load() != 0 {
		t.Errorf("3 calls: %d on the RoundTripper and %d through the HTTPClient, want 3 and 0", through.Load(), around.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A worker whose client keeps cookies sends them, each call with its own header, so that calls
// in parallel do not write one map (the race detector watches); and every call says it is JSON.
func TestPostWithACookieJar(t *testing.T) {
	var mu sync.Mutex
	var withCookie, notJSON int
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if _, err := r.Cookie("session"); err == nil {
			withCookie++
		}
		if r.Header.Get("Content-Type") != "application/json" {
			notJSON++
		}
		mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "s1", Path: "/"})
		io.WriteString(w, `{"duration":0.001,"task_alive":true}`)
	}))
	defer s.Close()
	jar, _ := cookiejar.New(nil)
	w, err := New(Config{ServerURL: s.URL, Username: "alice", Password: "secret", HTTPClient: &http.Client{Jar: jar}}, &SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.post(context.Background(), "beat", w.taskRequest("0123456789abcdef01234567", 3)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := w.post(context.Background(), "beat", w.taskRequest("0123456789abcdef01234567", 3)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if withCookie != 8 || notJSON != 0 {
		t.Errorf("%d of 8 calls after the first carried the cookie; %d of 9 were not JSON", withCookie, notJSON)
	}
}

// A reply shorter than the length it announced is a failed call, as net/http reads it, not a
// shorter reply.
func TestPostShortReply(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, `{"duration":0.001}`)
	}))
	defer s.Close()
	w, err := New(Config{ServerURL: s.URL, Username: "alice", Password: "secret"}, &SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.post(context.Background(), "beat", w.taskRequest("0123456789abcdef01234567", 3)); err == nil {
		t.Error("a reply cut short was taken")
	}
}

// A POST carries the worker's password in its body, which Go's client would send again on a
// 307 or 308, to whatever host the redirect names: the worker follows no redirect of a POST,
// neither a source request nor a worker API call, with its own client or the caller's (left
// unchanged), and the other host receives nothing. A GET (a network, which a server may keep on
// its nn_url host) follows its redirect there, carrying no credentials.
func TestRedirects(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string // what the other host received: method, path, body and credentials
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		elsewhere = append(elsewhere, strings.Join([]string{r.Method, r.URL.String(), string(body),
			r.Header.Get("Authorization"), r.Header.Get("Cookie")}, " "))
		mu.Unlock()
		io.WriteString(w, `{"duration":0.001,"version":1}`)
	}))
	defer other.Close()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/nn/") {
			http.Redirect(w, r, other.URL+"/files/"+strings.TrimPrefix(r.URL.Path, "/api/nn/"), http.StatusFound)
			return
		}
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer server.Close()
	calls := []struct {
		name string
		call func(context.Context, *Worker) error
	}{
		{"a source request", func(ctx context.Context, w *Worker) error {
			resp, err := w.Fetch(ctx, protocol.SourcePath, w.SourceRequest(strings.Repeat("a", 40)))
			if err == nil {
				resp.Body.Close()
			}
			return err
		}},
		{"a worker API call", func(ctx context.Context, w *Worker) error {
			_, err := w.post(ctx, "request_version", protocol.Request{Password: w.cfg.Password, WorkerInfo: w.Info()})
			return err
		}},
	}
	jar, _ := cookiejar.New(nil)
	callers := &http.Client{Jar: jar}
	for _, hc := range []struct {
		name   string
		client *http.Client
	}{{"the worker's client", nil}, {"the caller's client", callers}} {
		w, err := New(Config{ServerURL: server.URL, Username: "alice", Password: "secret", HTTPClient: hc.client}, &SimSource{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range calls {
			t.Run(hc.name+", "+c.name, func(t *testing.T) {
				mu.Lock()
				elsewhere = nil
				mu.Unlock()
				if err := c.call(context.Background(), w); !errors.Is(err, errRedirectedPOST) {
					t.Errorf("%v, want the redirect refused", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(elsewhere) != 0 {
					t.Errorf("the other host received %q", elsewhere)
				}
			})
		}
		t.Run(hc.name+", a network", func(t *testing.T) {
			mu.Lock()
			elsewhere = nil
			mu.Unlock()
			resp, err := w.Fetch(context.Background(), "/api/nn/nn-0123456789ab.nnue", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != http.StatusOK || len(elsewhere) != 1 || elsewhere[0] != "GET /files/nn-0123456789ab.nnue   " {
				t.Errorf("%d; the other host received %q, want one GET without body or credentials", resp.StatusCode, elsewhere)
			}
		})
	}
	if callers.CheckRedirect != nil {
		t.Error("New changed the caller's client")
	}
}
