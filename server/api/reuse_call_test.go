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

// An update shares its task's lists (architecture, python_version, gcc_version) when they are
// the ones the worker sends again, and makes its own when they differ: a worker upgraded while
// holding its task has the new ones stored, and its earlier ones are not changed under any
// other task that holds them.
func TestAnUpdateKeepsOrReplacesItsTasksLists(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 100000})
	if code, out := f.post("/api/request_task", call(0, nil)); code != http.StatusOK || out["task_id"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	lists := func() string {
		wi := f.run(id).Tasks[0].WorkerInfo
		return fmt.Sprint(wi.Architecture, wi.PythonVersion, wi.GCCVersion)
	}
	const first = "[64bit ELF] [3 11 2] [13 2 0]"
	for i := range 3 {
		if code, out := f.post("/api/update_task", call(0, map[string]any{"run_id": id, "task_id": 0, "stats": draws(i + 1)})); code != http.StatusOK {
			t.Fatalf("update_task: %d %v", code, out)
		}
		if got := lists(); got != first {
			t.Fatalf("update %d: lists %s, want %s", i, got, first)
		}
	}
	kept := f.run(id).Tasks[0].WorkerInfo
	upgraded := call(0, map[string]any{"run_id": id, "task_id": 0, "stats": draws(4)})
	wi := upgraded["worker_info"].(map[string]any)
	wi["architecture"], wi["python_version"], wi["gcc_version"] = []string{"64bit", "Mach-O"}, []int{3, 12, 1}, []int{14, 1, 0}
	if code, out := f.post("/api/update_task", upgraded); code != http.StatusOK {
		t.Fatalf("update_task: %d %v", code, out)
	}
	if got, want := lists(), "[64bit Mach-O] [3 12 1] [14 1 0]"; got != want {
		t.Errorf("after the upgrade: lists %s, want %s", got, want)
	}
	if got := fmt.Sprint(kept.Architecture, kept.PythonVersion, kept.GCCVersion); got != first {
		t.Errorf("the earlier worker_info's lists changed: %s, want %s", got, first)
	}
}
