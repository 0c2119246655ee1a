package journal

import (
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// benchTask is a task as request_task makes it, with a few batches reported.
func benchTask() rundb.Task {
	return rundb.Task{
		NumGames: 480, Active: true, LastUpdated: time.Now().UTC(), Start: 960,
		Stats: rundb.Results{Wins: 40, Losses: 38, Draws: 82, Pentanomial: []int{2, 18, 40, 16, 4}},
		WorkerInfo: rundb.WorkerInfo{
			Uname: "Linux 6.1.0-13-amd64", Architecture: []string{"64bit", "ELF"}, Concurrency: 8,
			MaxMemory: 8000, MinThreads: 1, Username: "worker", Version: 280,
			PythonVersion: []int{3, 11, 2}, GCCVersion: []int{12, 2, 0}, Compiler: "g++",
			UniqueKey: "4a3f9c2e-9a21-4c4e-8f3a-2b6c1d0e9f11", WorkerArch: "x86-64-avx2",
			ARCH: "x86-64-avx2", NPS: 1.2e6, RemoteAddr: "203.0.113.7", CountryCode: "NL",
		},
	}
}

// BenchmarkJournalRecordEncode measures what update_task pays, under the run's lock, to encode
// its journal record on the embedded database: the task's whole after-image, or its changing
// part when the worker is the same; and what request_task pays for its new task's.
func BenchmarkJournalRecordEncode(b *testing.B) {
	j := &Journal{codec: rundb.NewCodec(true), epoch: 3}
	run := &rundb.Run{ID: rundb.NewObjectID(), Tasks: []rundb.Task{benchTask(), benchTask()}, LastUpdated: time.Now().UTC()}
	before := run.Tasks[1]
	moved := before // the same task, reported before from another address: the whole task is written
	moved.WorkerInfo.RemoteAddr = "198.51.100.1"
	for _, bc := range []struct {
		name string
		m    Mark
	}{
		{"whole task", Mark{tasks: 2, before: &moved}},
		{"changing part", Mark{tasks: 2, before: &before}},
		{"new task", Mark{tasks: 1}}, // request_task's record: task 1 appended
	} {
		b.Run(bc.name, func(b *testing.B) {
			size := 0
			for b.Loop() {
				run.Tasks[1].Stats.Wins++
				task := 1
				if bc.m.before == nil {
					task = -1
				}
				rec := j.makeRecord(run, task, bc.m)
				doc, err := j.encodeRecord(rec)
				if err != nil {
					b.Fatal(err)
				}
				size = len(doc)
			}
			b.ReportMetric(float64(size), "bytes/record")
		})
	}
	// What Record does for the changing part: the same bytes, into a reused buffer.
	b.Run("changing part, as Record encodes it", func(b *testing.B) {
		m := Mark{tasks: 2, before: &before}
		buf := make([]byte, 0, 512)
		for b.Loop() {
			run.Tasks[1].Stats.Wins++
			doc, _, ok := j.appendCoreChange(buf[:0], run, 1, m)
			if !ok {
				b.Fatal("not a core record")
			}
			buf = doc
		}
		b.ReportMetric(float64(len(buf)), "bytes/record")
	})
	// What Record does for request_task's new task.
	b.Run("new task, as Record encodes it", func(b *testing.B) {
		m := Mark{tasks: 1}
		buf := make([]byte, 0, 512)
		for b.Loop() {
			run.Tasks[1].Stats.Wins++
			doc, _, ok := j.appendNewTaskChange(buf[:0], run, -1, m)
			if !ok {
				b.Fatal("not a new task's record")
			}
			buf = doc
		}
		b.ReportMetric(float64(len(buf)), "bytes/record")
	})
}
