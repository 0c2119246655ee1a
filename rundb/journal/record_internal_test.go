package journal

import (
	"bytes"
	"log/slog"
	"math"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// Record's way for update_task's usual record (appendCoreChange) writes the bytes makeRecord
// and encodeRecord write, and leaves every other record to them.
func TestRecordCoreChangeEncodesAsMakeRecord(t *testing.T) {
	inf := math.Inf(1)
	for _, tt := range []struct {
		name   string
		change func(r *rundb.Run)
		task   int
		fast   bool
	}{
		{"a batch reported", func(r *rundb.Run) { r.Tasks[1].Stats.Wins++ }, 1, true},
		{"the task ends", func(r *rundb.Run) { r.Tasks[1].Active = false }, 1, true},
		{"a task appended too", func(r *rundb.Run) { r.Tasks = append(r.Tasks, benchTask()) }, 1, false},
		{"a new task alone", func(r *rundb.Run) { r.Tasks = append(r.Tasks, benchTask()) }, -1, false},
		{"another address", func(r *rundb.Run) { r.Tasks[1].WorkerInfo.RemoteAddr = "198.51.100.1" }, 1, false},
		{"an SPSA run", func(r *rundb.Run) { r.Args.SPSA = &rundb.SPSA{Params: []rundb.SPSAParam{{Theta: 1}}} }, 1, false},
		{"an infinite residual", func(r *rundb.Run) { r.Tasks[1].Residual = &inf }, 1, false},
	} {
		for _, flat := range []bool{false, true} {
			j := &Journal{codec: rundb.NewCodec(flat), epoch: 5}
			r := &rundb.Run{ID: rundb.NewObjectID(), Tasks: []rundb.Task{benchTask(), benchTask()}, JournalEpoch: 5, JournalSeq: 41}
			m := MarkOf(r, tt.task)
			tt.change(r)
			got, pos, ok := j.appendCoreChange([]byte("stale bytes"), r, tt.task, m)
			if ok != tt.fast {
				t.Fatalf("%s, flat %v: fast %v, want %v", tt.name, flat, ok, tt.fast)
			}
			if !ok {
				continue
			}
			rec := j.makeRecord(r, tt.task, m)
			want, err := j.encodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[len("stale bytes"):], want) || pos != rec.pos() {
				t.Errorf("%s, flat %v: at %v\n %x\nwant at %v\n %x", tt.name, flat, pos, got, rec.pos(), want)
			}
		}
	}
}

// Entries and their buffers are reused once written: every record must still be read back
// as it was made, whether its caller waited for it or not.
func TestRecordsSurviveTheReuseOfEntries(t *testing.T) {
	ctx := t.Context()
	db := rundbtest.Open(t)
	j, err := Open(ctx, db, Options{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rundb.Run{ID: rundb.NewObjectID(), Tasks: []rundb.Task{benchTask(), benchTask()}}
	const n = 300
	var pending []<-chan error
	for i := range n {
		m := MarkOf(r, i%2)
		r.Tasks[i%2].Stats.Wins = 1000 + i
		done, err := j.Record(r, i%2, m)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // some waited for at once, the rest later: batches of both
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		} else {
			pending = append(pending, done)
		}
	}
	for _, done := range pending {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	names, err := j.out.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, name := range names {
		err := j.out.read(ctx, name, func(raw []byte) error {
			stored, rec, err := j.decodeStored(raw)
			if err != nil {
				return err
			}
			i := int(rec.Seq) - 1
			if len(rec.Tasks) != 1 || rec.Tasks[0].Core == nil || rec.Tasks[0].Index != i%2 ||
				rec.Tasks[0].Core.Stats.Wins != 1000+i || stored.Seq != rec.Seq {
				t.Errorf("record %d read back as %+v", rec.Seq, rec.Tasks)
			}
			seen++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen != n {
		t.Errorf("read back %d records, want %d", seen, n)
	}
}

// A record of any shape is stored in the bytes the driver writes for a storedRecord.
func TestStoredRecordEncodesAsTheDriverDoes(t *testing.T) {
	for _, rec := range []*journalRecord{
		{Run: rundb.NewObjectID(), Epoch: 1, Seq: 1},
		{Run: rundb.NewObjectID(), Epoch: 1 << 40, Seq: math.MaxInt64},
		{Run: rundb.NewObjectID(), Epoch: 0, Seq: -1},
	} {
		for _, inner := range [][]byte{nil, {}, []byte("\x05\x00\x00\x00\x00"), bytes.Repeat([]byte{7}, 1000)} {
			want, err := bson.Marshal(storedRecord{Run: rec.Run, Epoch: rec.Epoch, Seq: rec.Seq, Record: inner})
			if err != nil {
				t.Fatal(err)
			}
			if got := appendStoredRecord(nil, rec, inner); !bytes.Equal(got, want) {
				t.Errorf("epoch %d seq %d, %d bytes: encoded\n %x\nthe driver writes\n %x", rec.Epoch, rec.Seq, len(inner), got, want)
			}
		}
	}
}
