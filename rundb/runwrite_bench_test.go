package rundb_test

import (
	"context"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// BenchmarkRunReplace is the run cache's flush: a whole run of 1,000 tasks (about 400 kB as
// fishtest stores it) replaced in the database, the embedded one unless SHOAL_TEST_MONGO_URI
// says otherwise. Its cost is what every flush_period spends on the database's side.
func BenchmarkRunReplace(b *testing.B) {
	ctx := context.Background()
	db := rundbtest.Open(b)
	r := sampleRun()
	r.Finished = false
	for len(r.Tasks) < 1000 {
		t := r.Tasks[len(r.Tasks)%2]
		t.Stats = rundb.NewResults()
		r.Tasks = append(r.Tasks, t)
	}
	if err := db.Runs.Insert(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Tasks[0].Stats.Wins++
		if err := db.Runs.Replace(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}
