package journal

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
)

// A change to an existing task that keeps its worker is journalled as the task's core alone;
// read back and replayed over the run as it was, it gives the run as it is, worker_info and all.
// A change of worker writes the whole task.
func TestJournalRecordOfAnUpdateKeepsTheWorker(t *testing.T) {
	for _, flat := range []bool{false, true} {
		j := &Journal{codec: rundb.NewCodec(flat), epoch: 2}
		later := time.Now().UTC().Truncate(time.Millisecond)
		for _, tt := range []struct {
			name     string
			change   func(*rundb.Task)
			wantCore bool
		}{
			{"a batch reported", func(t *rundb.Task) {
				t.Stats = rundb.Results{Wins: 41, Losses: 38, Draws: 83, Pentanomial: []int{2, 18, 41, 16, 4}}
				t.LastUpdated = later
				t.WorkerInfo.Architecture = []string{"64bit", "ELF"} // the worker's new report, equal
			}, true},
			{"the task ends", func(t *rundb.Task) { t.Active = false; t.LastUpdated = later }, true},
			{"the worker reports another address", func(t *rundb.Task) { t.WorkerInfo.RemoteAddr = "198.51.100.1" }, false},
			{"the worker reports another compiler", func(t *rundb.Task) { t.WorkerInfo.GCCVersion = []int{13, 1, 0} }, false},
		} {
			before := &rundb.Run{ID: rundb.NewObjectID(), Tasks: []rundb.Task{benchTask(), benchTask()}, JournalEpoch: 2, JournalSeq: 7}
			before.Tasks[1].LastUpdated = later.Add(-time.Minute)
			after := cloneForTest(t, before)
			m := MarkOf(after, 1)
			tt.change(&after.Tasks[1])
			rec := j.makeRecord(after, 1, m)
			if len(rec.Tasks) != 1 || (rec.Tasks[0].Core != nil) != tt.wantCore || (rec.Tasks[0].Task != nil) == tt.wantCore {
				t.Fatalf("flat %v, %s: record %+v, want the core alone: %v", flat, tt.name, rec.Tasks, tt.wantCore)
			}
			raw, err := j.encodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			_, read, err := j.decodeStored(raw)
			if err != nil {
				t.Fatal(err)
			}
			replayed := cloneForTest(t, before)
			if err := applyRecord(replayed, read); err != nil {
				t.Fatal(err)
			}
			replayed.JournalEpoch, replayed.JournalSeq = after.JournalEpoch, after.JournalSeq
			if !reflect.DeepEqual(replayed.Tasks, after.Tasks) {
				t.Errorf("flat %v, %s: replayed tasks\n %+v, want\n %+v", flat, tt.name, replayed.Tasks, after.Tasks)
			}
		}
	}
	// A core for a task the run does not have is an error, not a new task.
	r := &rundb.Run{Tasks: []rundb.Task{benchTask()}}
	if err := applyRecord(r, &journalRecord{Tasks: []journalTask{{Index: 1, Core: coreOf(&r.Tasks[0])}}}); err == nil {
		t.Error("a change to a missing task was applied")
	}
}

// cloneForTest deep-copies r through BSON.
func cloneForTest(t *testing.T, r *rundb.Run) *rundb.Run {
	t.Helper()
	raw, err := bson.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out rundb.Run
	if err := bson.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// The records update_task writes most are encoded without reflection: byte for byte what the
// driver's encoder writes, for every optional field present or absent and for both stores'
// encodings; the records of other shapes are left to the driver.
func TestJournalCoreRecordsEncodeAsTheDriverDoes(t *testing.T) {
	taskID, residual, negative := 17, -1.25, -3
	when := time.Date(2026, 11, 25, 20, 1, 2, 345_678_901, time.UTC)
	cores := []taskCore{
		{NumGames: 480, Active: true, LastUpdated: when, Start: 960,
			Stats: rundb.Results{Wins: 40, Losses: 38, Draws: 82, Crashes: 1, TimeLosses: 2, Pentanomial: []int{2, 18, 40, 16, 4}}},
		{NumGames: 1 << 40, Start: -5, Stats: rundb.Results{Wins: math.MaxInt32 + 1, Pentanomial: []int{}}},
		{NumGames: 8, Active: true, Bad: true, TaskID: &taskID, Residual: &residual, ResidualColor: "yellow",
			LastUpdated: time.Date(1960, 1, 1, 0, 0, 0, 999_999, time.UTC), Stats: rundb.Results{Losses: negative}},
		{Residual: new(float64)}, // the zero time, a zero residual
	}
	for _, flat := range []bool{false, true} {
		j := &Journal{codec: rundb.NewCodec(flat)}
		for n := 1; n <= len(cores); n++ {
			rec := &journalRecord{Run: rundb.NewObjectID(), Epoch: 3, Seq: int64(n) << 33, LastUpdated: when.Add(time.Duration(n) * time.Hour)}
			for i := range n {
				rec.Tasks = append(rec.Tasks, journalTask{Index: i * 1000, Core: &cores[i]})
			}
			got, ok := appendCoreRecord(nil, rec)
			if !ok {
				t.Fatalf("flat %v: a record of %d cores was left to the driver", flat, n)
			}
			want, err := j.reflectRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("flat %v, %d cores: encoded\n %x\nthe driver writes\n %x", flat, n, got, want)
			}
		}
	}
	inf := math.Inf(1)
	whole := benchTask()
	for name, rec := range map[string]*journalRecord{
		"no task":           {Run: rundb.NewObjectID()},
		"a whole task":      {Tasks: []journalTask{{Task: &whole}}},
		"an SPSA step":      {Tasks: []journalTask{{Core: &cores[0]}}, SPSA: &journalSPSA{Iter: 1, Theta: []float64{1}}},
		"SPSA flips":        {Tasks: []journalTask{{Core: &taskCore{SPSAParams: &rundb.SPSAParams{Iter: 2}}}}},
		"infinite residual": {Tasks: []journalTask{{Core: &taskCore{Residual: &inf}}}},
	} {
		if _, ok := appendCoreRecord(nil, rec); ok {
			t.Errorf("%s: encoded without the driver", name)
		}
	}
}
