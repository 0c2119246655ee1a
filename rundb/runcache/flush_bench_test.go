package runcache_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// BenchmarkRunEncode is the part of a flush done under the run's lock: encoding the whole run,
// afresh (Codec.Encode) or by an Encoder that encoded it before, as the cache's flush does.
func BenchmarkRunEncode(b *testing.B) {
	for _, ferret := range []bool{false, true} {
		for _, n := range []int{200, 2000} {
			r := rundbtest.SampleRunWithTasks(n)
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
	r := rundbtest.SampleRunWithTasks(200)
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
