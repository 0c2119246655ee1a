package worker

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
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
