package bench

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The bare server answers a beat's JSON body with a JSON object, as the ceiling's load
// generator counts success, rejects what is not JSON, ends with its context, and then reports
// what it allocated while it served, which the bench divides by the requests it sent.
func TestServeBareAnswersJSONAndStops(t *testing.T) {
	port, err := LoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	var out strings.Builder
	go func() { served <- ServeBare(ctx, []string{addr}, &out) }()
	post := func(body string) (*http.Response, error) {
		var resp *http.Response
		var err error
		for range 100 { // until it listens
			resp, err = http.Post("http://"+addr+"/api/beat", "application/json", strings.NewReader(body))
			if err == nil {
				return resp, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil, err
	}
	resp, err := post(`{"password": "x", "run_id": "r", "task_id": 0}`)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		TaskAlive *bool    `json:"task_alive"`
		Duration  *float64 `json:"duration"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reply)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || reply.TaskAlive == nil || !*reply.TaskAlive || reply.Duration == nil {
		t.Errorf("beat: status %d, reply %+v, err %v; want 200 with task_alive true and a duration", resp.StatusCode, reply, err)
	}
	if resp, err := post(`not json`); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is not JSON: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeBare after its context ended: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeBare did not return after its context ended")
	}
	// Two requests through net/http and a JSON decode and encode each: a few kB at the least.
	if n, ok := bareAllocated(out.String()); !ok || n < 2_000 {
		t.Errorf("ServeBare's report %q: allocated %d (found %v), want at least 2,000 bytes", out.String(), n, ok)
	}
	if _, ok := bareAllocated("listening\n"); ok {
		t.Error("bareAllocated found a count in output that has none")
	}
	if err := ServeBare(t.Context(), nil, io.Discard); err == nil {
		t.Error("ServeBare without an address: no error")
	}
}
