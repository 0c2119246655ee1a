// Package servertest holds the test helpers that the tests of server and of its sub-packages
// (server/api, server/ui) share. It builds no server itself: each suite builds its own.
package servertest

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// DiscardLogger is a logger that writes nothing.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Do serves one request without a body to h.
func Do(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// APIError decodes fishtest's JSON error shape and checks it is complete: it returns the
// error's message and the duration.
func APIError(t testing.TB, w *httptest.ResponseRecorder) (string, float64) {
	t.Helper()
	var body struct {
		Error    *string  `json:"error"`
		Duration *float64 `json:"duration"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("reply is not JSON: %v: %s", err, w.Body)
	}
	if body.Error == nil || body.Duration == nil {
		t.Fatalf("reply lacks error or duration: %s", w.Body)
	}
	return *body.Error, *body.Duration
}

// Parallel runs n calls of fn at once (released together) and counts the statuses they return.
func Parallel(n int, fn func(i int) int) map[int]int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		codes = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			<-start
			code := fn(i)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return codes
}
