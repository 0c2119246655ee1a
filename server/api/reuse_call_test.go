package api_test

import (
	"fmt"
	"net/http"
	"testing"
)

// A worker call's body, its decoded request and the reply's buffer are reused by the calls
// after it: what a call stored (its task's worker_info and stats) must not change with the
// bytes of the calls that follow.
func TestACallsStoredValuesOutliveItsBuffers(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 100000})
	other := func(extra map[string]any) map[string]any {
		b := call(1, extra)
		wi := b["worker_info"].(map[string]any)
		wi["uname"], wi["architecture"], wi["python_version"] = "Darwin 23.1.0 other", []string{"32bit", "Mach-O"}, []int{3, 12, 9}
		wi["gcc_version"], wi["ARCH"], wi["nps"] = []int{15, 1, 1}, "x86-64-bmi2 other", 7654321.5
		return b
	}
	for _, body := range []map[string]any{call(0, nil), other(nil)} {
		if code, out := f.post("/api/request_task", body); code != http.StatusOK || out["task_id"] == nil {
			t.Fatalf("request_task: %d %v", code, out)
		}
	}
	if code, out := f.post("/api/update_task", call(0, map[string]any{"run_id": id, "task_id": 0, "stats": draws(3)})); code != http.StatusOK {
		t.Fatalf("update_task: %d %v", code, out)
	}
	stored := func() string {
		task := f.run(id).Tasks[0]
		return fmt.Sprintf("%#v %#v", task.WorkerInfo, task.Stats)
	}
	task := f.run(id).Tasks[0]
	wi, st := task.WorkerInfo, task.Stats
	if wi.Uname != "Linux 6.1.0" || fmt.Sprint(wi.Architecture, wi.PythonVersion, wi.GCCVersion) != "[64bit ELF] [3 11 2] [13 2 0]" ||
		wi.UniqueKey != "ab000000-5a28-4b7d-b27b-d78d97ecf11a" || st.Draws != 6 || fmt.Sprint(st.Pentanomial) != "[0 0 3 0 0]" {
		t.Fatalf("task 0 does not hold what its worker sent: %#v %#v", wi, st)
	}
	before := stored()
	for i := range 20 {
		f.post("/api/update_task", other(map[string]any{"run_id": id, "task_id": 1, "stats": draws(i + 1)}))
		f.post("/api/beat", other(map[string]any{"run_id": id, "task_id": 1}))
		f.post("/api/request_version", other(nil))
		f.post("/api/worker_log", other(map[string]any{"message": fmt.Sprintf("log line %d", i)}))
	}
	if after := stored(); after != before {
		t.Errorf("task 0 changed with the other worker's calls:\nbefore %s\nafter  %s", before, after)
	}
}
