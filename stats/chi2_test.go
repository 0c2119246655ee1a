package stats

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

type chi2Reference struct {
	Cases []struct {
		Name    string
		Exclude []string
		Tasks   []struct {
			Key                 string
			Bad                 bool
			Wins, Losses, Draws int
			Pentanomial         []int
		}
		Chi2       refFloat
		DOF        int
		P          refFloat
		Residual   [][2]any // [unique_key, residual] in fishtest's dict order
		Colors     []string
		Z95        refFloat `json:"z_95"`
		Z99        refFloat `json:"z_99"`
		BadWorkers []struct {
			P, Res  float64
			Iters   int
			Workers []string // in the order they were found
		} `json:"bad_workers"`
	}
	CrashOrTime []struct {
		Crashes    int
		TimeLosses int `json:"time_losses"`
		Games      int
		Bad        bool
	} `json:"crash_or_time"`
	Colors []struct {
		Residual refFloat
		Z95      refFloat `json:"z_95"`
		Z99      refFloat `json:"z_99"`
		Color    string
	}
}

func loadChi2Reference(t *testing.T) chi2Reference {
	var ref chi2Reference
	readReferenceJSON(t, "chi2_reference.json", &ref)
	if len(ref.Cases) == 0 {
		t.Fatal("chi2 reference is empty")
	}
	return ref
}

// residualValue decodes the second element of a [key, residual] pair.
func residualValue(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return x
	case string:
		var f refFloat
		if err := f.UnmarshalJSON([]byte(`"` + x + `"`)); err != nil {
			t.Fatal(err)
		}
		return float64(f)
	}
	t.Fatalf("residual %v has type %T", v, v)
	return 0
}

func TestGetChi2MatchesFishtest(t *testing.T) {
	ref := loadChi2Reference(t)
	for _, c := range ref.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tasks := make([]TaskResult, len(c.Tasks))
			for i, task := range c.Tasks {
				tasks[i] = TaskResult{UniqueKey: task.Key, Bad: task.Bad, Wins: task.Wins,
					Losses: task.Losses, Draws: task.Draws, Pentanomial: task.Pentanomial}
			}
			exclude := map[string]bool{}
			for _, k := range c.Exclude {
				exclude[k] = true
			}
			got := GetChi2(tasks, exclude)
			checkClose(t, "chi2", got.Chi2, float64(c.Chi2), tolExact)
			checkClose(t, "p", got.P, float64(c.P), tolExact)
			if got.DOF != c.DOF {
				t.Errorf("dof = %d, fishtest %d", got.DOF, c.DOF)
			}
			checkClose(t, "z_95", got.Z95, float64(c.Z95), tolExact)
			checkClose(t, "z_99", got.Z99, float64(c.Z99), tolExact)

			var wantKeys []string
			for _, kv := range c.Residual {
				wantKeys = append(wantKeys, kv[0].(string))
			}
			if !slices.Equal(got.Workers, wantKeys) {
				t.Fatalf("workers %v, fishtest %v", got.Workers, wantKeys)
			}
			if len(got.Residual) != len(wantKeys) {
				t.Errorf("%d residuals, fishtest %d", len(got.Residual), len(wantKeys))
			}
			for i, kv := range c.Residual {
				key := kv[0].(string)
				r, ok := got.Residual[key]
				if !ok {
					t.Errorf("no residual for %s", key)
					continue
				}
				checkClose(t, "residual of "+key, r, residualValue(t, kv[1]), tolExact)
				if color := ResidualColor(r, got); color != c.Colors[i] {
					t.Errorf("color of %s (%g) = %s, fishtest %s", key, r, color, c.Colors[i])
				}
			}

			for _, b := range c.BadWorkers {
				bad := GetBadWorkers(tasks, b.P, b.Res, b.Iters)
				if !slices.Equal(bad, b.Workers) {
					t.Errorf("GetBadWorkers(p=%g, res=%g, iters=%d) = %v, fishtest %v", b.P, b.Res, b.Iters, bad, b.Workers)
				}
			}
		})
	}
}

func TestGetChi2WithoutEnoughWorkersReturnsTheNaNDefault(t *testing.T) {
	penta := func(key string, pairs int) TaskResult {
		return TaskResult{UniqueKey: key, Pentanomial: []int{pairs / 20, pairs / 5, pairs / 2, pairs / 5, pairs / 20}}
	}
	for _, c := range []struct {
		name  string
		tasks []TaskResult
	}{
		{"nil tasks", nil},
		{"no tasks", []TaskResult{}},
		{"one worker with several tasks", []TaskResult{penta("a", 1000), penta("a", 2000)}},
		{"second worker only has bad tasks", []TaskResult{penta("a", 1000), {UniqueKey: "b", Bad: true, Pentanomial: []int{100, 100, 100, 100, 100}}}},
		{"workers without games", []TaskResult{penta("a", 0), penta("b", 0)}},
		{"workers with too few games", []TaskResult{penta("a", 10), penta("b", 12), penta("c", 9)}},
		{"pentanomial cells of the wrong length count as empty", []TaskResult{
			{UniqueKey: "a", Pentanomial: []int{}}, {UniqueKey: "b", Pentanomial: []int{1000, 1000}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := GetChi2(c.tasks, nil)
			if !math.IsNaN(got.Chi2) || !math.IsNaN(got.P) || !math.IsNaN(got.Z95) || !math.IsNaN(got.Z99) {
				t.Errorf("got %+v, want NaN statistics", got)
			}
			if got.DOF != 0 || got.Residual == nil || len(got.Residual) != 0 || len(got.Workers) != 0 {
				t.Errorf("got %+v, want dof 0 and an empty residual map", got)
			}
			if bad := GetBadWorkers(c.tasks, ManualPurgeP, ManualPurgeResidual, 3); len(bad) != 0 {
				t.Errorf("GetBadWorkers = %v, want none", bad)
			}
			if color := ResidualColor(0, got); color != ResidualRed {
				t.Errorf("ResidualColor with NaN thresholds = %s, want red as in fishtest", color)
			}
		})
	}
}

func TestGetChi2HugeCountsGiveNumbers(t *testing.T) {
	const games = 1 << 31
	pairs := games / 2
	var tasks []TaskResult
	for i := range 4 {
		shift := (i - 2) * 1000
		tasks = append(tasks, TaskResult{
			UniqueKey:   fmt.Sprintf("w%d", i),
			Pentanomial: []int{pairs / 100, pairs/5 + shift, pairs/2 - pairs/50, pairs/5 - shift, pairs / 100},
		})
	}
	got := GetChi2(tasks, nil)
	if math.IsNaN(got.Chi2) || math.IsNaN(got.P) || got.P < 0 || got.P > 1 {
		t.Fatalf("chi2 %g, p %g: want numbers", got.Chi2, got.P)
	}
	if got.DOF != 6 || len(got.Residual) != 4 {
		t.Fatalf("dof %d with %d residuals, want 6 and 4", got.DOF, len(got.Residual))
	}
	for k, r := range got.Residual {
		if math.IsNaN(r) || r < 0 {
			t.Errorf("residual of %s = %g", k, r)
		}
	}
}

func TestGetChi2ResidualIsInfiniteWhenTheTailUnderflows(t *testing.T) {
	// scipy's norm.isf(0) is +inf; the purge must still see this worker as the worst.
	var tasks []TaskResult
	for i := range 10 {
		tasks = append(tasks, TaskResult{UniqueKey: fmt.Sprint(i), Wins: 100000, Losses: 100000, Draws: 100000})
	}
	tasks = append(tasks, TaskResult{UniqueKey: "cheat", Wins: 120000, Losses: 90000, Draws: 90000})
	got := GetChi2(tasks, nil)
	if !math.IsInf(got.Residual["cheat"], 1) {
		t.Errorf("residual of cheat = %g, want +Inf", got.Residual["cheat"])
	}
	if got.P != 0 {
		t.Errorf("p = %g, want 0", got.P)
	}
	if r := got.Residual["0"]; math.IsInf(r, 0) || math.IsNaN(r) {
		t.Errorf("residual of an ordinary worker = %g, want a number", r)
	}
	if bad := GetBadWorkers(tasks, AutoPurgeP, AutoPurgeResidual, 1); !slices.Equal(bad, []string{"cheat"}) {
		t.Errorf("GetBadWorkers = %v, want [cheat]", bad)
	}
}

func TestGetBadWorkersBreaksTiesByFirstSeenTask(t *testing.T) {
	normal := func(key string) TaskResult {
		return TaskResult{UniqueKey: key, Pentanomial: []int{10, 170, 440, 170, 10}}
	}
	twin := func(key string) TaskResult {
		return TaskResult{UniqueKey: key, Pentanomial: []int{80, 300, 300, 100, 20}}
	}
	for _, c := range []struct {
		name  string
		tasks []TaskResult
		want  string
	}{
		{"A seen first", []TaskResult{normal("n1"), twin("A"), normal("n2"), twin("B"), normal("n3")}, "A"},
		{"B seen first", []TaskResult{normal("n1"), twin("B"), normal("n2"), twin("A"), normal("n3")}, "B"},
		{"A's first task decides even if B has more later", []TaskResult{twin("A"), twin("B"), normal("n1"), normal("n2"), normal("n3")}, "A"},
	} {
		t.Run(c.name, func(t *testing.T) {
			chi := GetChi2(c.tasks, nil)
			if chi.Residual["A"] != chi.Residual["B"] {
				t.Fatalf("twins have residuals %g and %g", chi.Residual["A"], chi.Residual["B"])
			}
			bad := GetBadWorkers(c.tasks, AutoPurgeP, AutoPurgeResidual, 1)
			if !slices.Equal(bad, []string{c.want}) {
				t.Errorf("GetBadWorkers = %v, want [%s]", bad, c.want)
			}
		})
	}
}

func TestGetBadWorkersStopsWhenNoWorkerStandsOut(t *testing.T) {
	tasks := []TaskResult{
		{UniqueKey: "a", Pentanomial: []int{10, 170, 440, 170, 10}},
		{UniqueKey: "b", Pentanomial: []int{11, 168, 441, 171, 9}},
		{UniqueKey: "c", Pentanomial: []int{9, 172, 439, 169, 11}},
		{UniqueKey: "bad", Pentanomial: []int{60, 300, 300, 100, 40}},
	}
	for _, c := range []struct {
		name  string
		iters int
		want  []string
	}{
		{"zero rounds find nothing", 0, nil},
		{"one round finds the outlier", 1, []string{"bad"}},
		{"more rounds stop once the rest agree", 5, []string{"bad"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := GetBadWorkers(tasks, AutoPurgeP, AutoPurgeResidual, c.iters); !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestCrashOrTimeMatchesFishtest(t *testing.T) {
	for _, c := range loadChi2Reference(t).CrashOrTime {
		t.Run(fmt.Sprintf("%d crashes %d time losses in %d games", c.Crashes, c.TimeLosses, c.Games), func(t *testing.T) {
			if got := CrashOrTime(c.Crashes, c.TimeLosses, c.Games); got != c.Bad {
				t.Errorf("got %v, fishtest %v", got, c.Bad)
			}
		})
	}
}

func TestResidualColorMatchesFishtest(t *testing.T) {
	for _, c := range loadChi2Reference(t).Colors {
		t.Run(fmt.Sprintf("%g against %g and %g", c.Residual, c.Z95, c.Z99), func(t *testing.T) {
			got := ResidualColor(float64(c.Residual), Chi2{Z95: float64(c.Z95), Z99: float64(c.Z99)})
			if got != c.Color {
				t.Errorf("got %s, fishtest %s", got, c.Color)
			}
		})
	}
}
