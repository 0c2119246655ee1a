package runcache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// bigRun is a run of n tasks, each with its worker_info and results, the shape whose whole
// document the cache rewrites on every flush.
func bigRun(n int) *rundb.Run {
	r := rundbtest.SampleRun()
	r.ID = rundb.NewObjectID()
	r.Finished = false
	proto := r.Tasks[1]
	r.Tasks = make([]rundb.Task, n)
	for i := range r.Tasks {
		t := proto
		t.Start = i * t.NumGames
		t.LastUpdated = proto.LastUpdated.Add(time.Duration(i) * time.Second)
		t.Stats.Pentanomial = append([]int(nil), proto.Stats.Pentanomial...)
		t.Stats.Wins += i
		r.Tasks[i] = t
	}
	return r
}

// BenchmarkRunEncode is the part of a flush done under the run's lock: encoding the whole run,
// afresh (Codec.Encode) or by an Encoder that encoded it before, as the cache's flush does.
func BenchmarkRunEncode(b *testing.B) {
	for _, ferret := range []bool{false, true} {
		for _, n := range []int{200, 2000} {
			r := bigRun(n)
			codec := rundb.NewCodec(ferret)
			b.Run(fmt.Sprintf("ferret=%v/tasks=%d/codec", ferret, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r.Tasks[0].Stats.Wins++
					if _, err := codec.Encode(r); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("ferret=%v/tasks=%d/encoder", ferret, n), func(b *testing.B) {
				enc := codec.NewEncoder()
				b.ReportAllocs()
				for b.Loop() {
					r.Tasks[0].Stats.Wins++
					if _, err := enc.Encode(r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRunCacheFlush is one run's flush: a change, then FlushOne encoding the run and
// replacing its document in the test database ("flush"), beside the write alone of an already
// encoded document ("write"). Runs are kept to 200 tasks (about 90 kB): whole-document
// rewrites on the embedded database cost time in proportion to the document's size.
func BenchmarkRunCacheFlush(b *testing.B) {
	ctx := context.Background()
	db := rundbtest.Open(b)
	r := bigRun(200)
	cache := runcache.New(db.Runs, runcache.Options{})
	if err := cache.Create(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.Run("flush", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := cache.Change(ctx, r.ID, func(r *rundb.Run) (runcache.Prio, error) {
				r.Tasks[0].Stats.Wins++
				return runcache.PrioNormal, nil
			}); err != nil {
				b.Fatal(err)
			}
			if _, ok, err := cache.FlushOne(ctx); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("write", func(b *testing.B) {
		// Two versions in turn, so that every write changes the document as a flush does.
		var docs [2][]byte
		for i := range docs {
			if err := cache.View(ctx, r.ID, func(r *rundb.Run) {
				r.Tasks[0].Stats.Wins++
				docs[i], _ = db.Runs.Codec().Encode(r)
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if err := db.Runs.ReplaceEncoded(ctx, r.ID, docs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
