package scheduler

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
)

// sortCandidates computes its keys once per run; the order must be the one the per-comparison
// keys gave (here the reference), ties and NaNs included, or workers are sent elsewhere.
func TestSortCandidatesKeepsTheOrder(t *testing.T) {
	reference := func(cands []candidate, lastRun string, maxThreads int) []rundb.ObjectID {
		cands = append([]candidate(nil), cands...)
		key := func(c *candidate) (float64, bool, float64) {
			cores := c.cores
			if c.id.Hex() == lastRun {
				cores += maxThreads
			}
			return -c.priority, cores > 0, (float64(cores) + float64(maxThreads)/2) / c.itp
		}
		sort.SliceStable(cands, func(i, j int) bool {
			a1, a2, a3 := key(&cands[i])
			b1, b2, b3 := key(&cands[j])
			if a1 != b1 {
				return a1 < b1
			}
			if a2 != b2 {
				return !a2
			}
			return a3 < b3
		})
		ids := make([]rundb.ObjectID, len(cands))
		for i := range cands {
			ids[i] = cands[i].id
		}
		return ids
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...float64) float64 { return vals[rng.IntN(len(vals))] }
	s := &Scheduler{}
	for round := range 500 {
		n := rng.IntN(70)
		cands := make([]candidate, n)
		for i := range cands {
			cands[i] = candidate{id: rundb.NewObjectID(), priority: pick(0, 0, 1, -1, math.NaN()),
				cores: rng.IntN(3) * 8, itp: pick(1, 1, 0.5, 2, math.Inf(1), math.NaN())}
		}
		lastRun := ""
		if n > 0 && rng.IntN(2) == 0 {
			lastRun = cands[rng.IntN(n)].id.Hex()
		}
		maxThreads := rng.IntN(3) * 4
		want := reference(cands, lastRun, maxThreads)
		for i, rk := range s.sortCandidates(cands, lastRun, maxThreads) {
			if got := cands[rk.i].id; got != want[i] {
				t.Fatalf("round %d: place %d is %s, want %s", round, i, got, want[i])
			}
		}
	}
}
