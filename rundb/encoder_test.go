package rundb_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

// withTasks is the sample run with n tasks, their results told apart by seed.
func withTasks(n, seed int) *rundb.Run {
	r := rundbtest.SampleRunWithTasks(n)
	for i := range r.Tasks {
		r.Tasks[i].Stats.Wins += seed
	}
	r.CommittedGames = seed
	return r
}

// An Encoder reused for documents that grow, shrink and change, and after an encoding that
// failed half-way, gives each the bytes Codec.Encode gives: nothing of an earlier document, or
// of the failed one, is left in its buffers.
func TestEncoderReusedEncodesAsCodec(t *testing.T) {
	bad := withTasks(3, 0)
	bad.Extra = rundb.Extra{"unencodable": make(chan int)}
	runs := []*rundb.Run{
		withTasks(50, 1), withTasks(50, 2), withTasks(3, 3), withTasks(0, 4), bad,
		withTasks(120, 5), withTasks(7, 6), bad, bad, withTasks(7, 7),
	}
	for _, ferret := range []bool{false, true} {
		t.Run(fmt.Sprintf("ferret=%v", ferret), func(t *testing.T) {
			codec := rundb.NewCodec(ferret)
			enc := codec.NewEncoder()
			for i, r := range runs {
				want, wantErr := codec.Encode(r)
				got, err := enc.Encode(r)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("run %d: Encoder error %v, Codec error %v", i, err, wantErr)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("run %d: Encoder gives %d bytes that differ from Codec's %d", i, len(got), len(want))
				}
			}
		})
	}
}
