package protocol_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// A request the Go worker marshals must read back, key for key, as what fishtest's Python worker
// sends, so that the server cannot tell the two workers apart.
func TestRequestTaskBodyRoundTrips(t *testing.T) {
	r, err := protocol.DecodeRequest([]byte(requestTaskBody), nil)
	if err != nil {
		t.Fatalf("the reference request_task body is rejected: %v", err)
	}
	w := r.WorkerInfo
	if r.Password != "secret" || w.Username != "fakeworker" || w.Version != protocol.Version ||
		w.WorkerArch != "x86-64-avx2" || w.Compiler != "g++" || w.GCCVersion != [3]int{13, 2, 0} ||
		w.ARCH != "?" || w.NPS != 0 || w.NearGithubAPILimit || w.Concurrency != 4 || w.MaxMemory != 8192 {
		t.Errorf("decoded %+v", r)
	}
	if r.RunID != nil || r.TaskID != nil || r.Stats != nil || r.SPSA != nil || r.PGN != nil || r.Message != nil {
		t.Errorf("request_task has no optional keys, decoded %+v", r)
	}

	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := generic(t, out), generic(t, []byte(requestTaskBody)); !reflect.DeepEqual(got, want) {
		t.Errorf("re-encoded body differs from the worker's:\n got %v\nwant %v", got, want)
	}
	again, err := protocol.DecodeRequest(out, nil)
	if err != nil || !reflect.DeepEqual(again, r) {
		t.Errorf("re-encoded body decodes to %+v, %v; want %+v", again, err, r)
	}
}

func TestUpdateBodiesRoundTrip(t *testing.T) {
	for name, body := range map[string]string{"update_task": updateTaskBody, "spsa update": spsaUpdateBody, "upload_pgn": uploadPGNBody} {
		t.Run(name, func(t *testing.T) {
			r, err := protocol.DecodeRequest([]byte(body), nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := generic(t, out), generic(t, []byte(body)); !reflect.DeepEqual(got, want) {
				t.Errorf("re-encoded body differs:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// generic decodes JSON with numbers as float64, so that 0 and 0.0 compare equal as in Python.
func generic(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWorkerNames(t *testing.T) {
	for _, c := range []struct {
		name        string
		w           protocol.WorkerInfo
		short, long string
	}{
		{"an unmodified worker", protocol.WorkerInfo{Username: "fakeworker", Concurrency: 4, UniqueKey: "ab12cd34-5a28-4b7d-b27b-d78d97ecf11a"},
			"fakeworker-4cores-ab12cd34", "fakeworker-4cores-ab12cd34-5a28"},
		{"a modified worker", protocol.WorkerInfo{Username: "u1", Concurrency: 16, UniqueKey: "x9-0a1b-2c3d-4e5f-0123456789ab", Modified: true},
			"u1-16cores-x9", "u1-16cores-x9-0a1b*"},
		{"a key without dashes", protocol.WorkerInfo{Username: "u1", Concurrency: 1, UniqueKey: "abc"},
			"u1-1cores-abc", "u1-1cores-abc"},
		{"an empty key on a modified worker", protocol.WorkerInfo{Username: "u1", Concurrency: 2, Modified: true},
			"u1-2cores", "u1-2cores*"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.w.ShortName(); got != c.short {
				t.Errorf("ShortName() = %q, want %q", got, c.short)
			}
			if got := c.w.LongName(); got != c.long {
				t.Errorf("LongName() = %q, want %q", got, c.long)
			}
		})
	}
}
