package journal

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// taskGen makes random tasks and SPSA states for the encoding tests: every optional field
// set or not, nil and empty slices, zero, extreme and odd values. replayable restricts them to
// what reads back equal (times in whole milliseconds, in UTC; no NaN; no empty pentanomial,
// which omitempty drops).
type taskGen struct {
	rnd        *rand.Rand
	replayable bool
}

var (
	genStrings = []string{"", "a", "worker", "ü日本語🎉", "nul\x00inside", "\xff\xfe not UTF-8", "x86-64-avx2",
		"4a3f9c2e-9a21-4c4e-8f3a-2b6c1d0e9f11", "a very long uname: Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian"}
	genInts   = []int{0, 1, -1, 480, math.MaxInt32, math.MaxInt32 + 1, math.MinInt32, math.MinInt32 - 1, math.MaxInt64, math.MinInt64}
	genFloats = []float64{0, math.Copysign(0, -1), 1.5, -2.25, 1.2e6, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN()}
)

func (g *taskGen) str() string {
	if g.rnd.IntN(4) == 0 { // random runes, some multi-byte
		b := make([]rune, g.rnd.IntN(12))
		for i := range b {
			b[i] = rune(g.rnd.IntN(0x1_0000))
		}
		return string(b)
	}
	return genStrings[g.rnd.IntN(len(genStrings))]
}

func (g *taskGen) int() int {
	if g.rnd.IntN(3) == 0 {
		return int(g.rnd.Int64N(1<<40)) - 1<<39
	}
	return genInts[g.rnd.IntN(len(genInts))]
}

func (g *taskGen) float() float64 {
	for {
		f := genFloats[g.rnd.IntN(len(genFloats))]
		if g.rnd.IntN(3) == 0 {
			f = g.rnd.NormFloat64() * 1e3
		}
		// The embedded database's codec reads ±MaxFloat64 back as infinities.
		if !g.replayable || (!math.IsNaN(f) && math.Abs(f) != math.MaxFloat64) {
			return f
		}
	}
}

func (g *taskGen) time() time.Time {
	var t time.Time
	switch g.rnd.IntN(5) {
	case 0: // the zero time
	case 1:
		t = time.Unix(0, 0)
	case 2:
		t = time.Date(1960, 1, 1, 0, 0, 0, 999_999, time.FixedZone("here", 3600))
	default:
		t = time.Unix(g.rnd.Int64N(1<<32), g.rnd.Int64N(1e9)).In(time.FixedZone("there", -7200))
	}
	if g.replayable {
		t = time.UnixMilli(t.UnixMilli()).UTC()
	}
	return t
}

// sliceLen is -1 for a nil slice, else a length, 0 among them.
func (g *taskGen) sliceLen() int { return g.rnd.IntN(6) - 1 }

func (g *taskGen) ints() []int       { return genSlice(g, g.int) }
func (g *taskGen) strings() []string { return genSlice(g, g.str) }

// genSlice is nil or a slice of gen's values (sliceLen).
func genSlice[T any](g *taskGen, gen func() T) []T {
	n := g.sliceLen()
	if n < 0 {
		return nil
	}
	vs := make([]T, n)
	for i := range vs {
		vs[i] = gen()
	}
	return vs
}

func (g *taskGen) workerInfo() rundb.WorkerInfo {
	return rundb.WorkerInfo{
		Uname: g.str(), Architecture: g.strings(), Concurrency: g.int(), MaxMemory: g.int(), MinThreads: g.int(),
		Username: g.str(), Version: g.int(), PythonVersion: g.ints(), GCCVersion: g.ints(), Compiler: g.str(),
		UniqueKey: g.str(), Modified: g.rnd.IntN(2) == 0, WorkerArch: g.str(), ARCH: g.str(), NPS: g.float(),
		NearGithubAPILimit: g.rnd.IntN(2) == 0, RemoteAddr: g.str(), CountryCode: g.str(),
	}
}

func (g *taskGen) task() rundb.Task {
	t := rundb.Task{NumGames: g.int(), Active: g.rnd.IntN(2) == 0, LastUpdated: g.time(), Start: g.int(),
		Stats:      rundb.Results{Wins: g.int(), Losses: g.int(), Draws: g.int(), Crashes: g.int(), TimeLosses: g.int(), Pentanomial: g.ints()},
		WorkerInfo: g.workerInfo(), Bad: g.rnd.IntN(2) == 0, ResidualColor: g.str()}
	if g.replayable && len(t.Stats.Pentanomial) == 0 {
		t.Stats.Pentanomial = nil
	}
	if g.rnd.IntN(2) == 0 {
		t.SPSAParams = &rundb.SPSAParams{Iter: g.int()}
		switch g.rnd.IntN(3) {
		case 0: // nil flips
		case 1:
			t.SPSAParams.PackedFlips = []byte{}
		default:
			t.SPSAParams.PackedFlips = []byte(g.str())
		}
	}
	if g.rnd.IntN(2) == 0 {
		id := g.int()
		t.TaskID = &id
	}
	if g.rnd.IntN(2) == 0 {
		residual := g.float()
		t.Residual = &residual
	}
	return t
}

// spsa is an SPSA state of n parameters, with no history rows.
func (g *taskGen) spsa(n int) *rundb.SPSA {
	s := &rundb.SPSA{Iter: g.int(), Params: make([]rundb.SPSAParam, n)}
	for i := range s.Params {
		s.Params[i] = rundb.SPSAParam{Name: g.str(), Theta: g.float()}
	}
	return s
}

// Records holding whole tasks (request_task's) and SPSA states are written by hand in the
// bytes the driver's encoder writes, for both stores' codecs, whatever the tasks hold.
func TestJournalTaskRecordsEncodeAsTheDriverDoes(t *testing.T) {
	g := &taskGen{rnd: rand.New(rand.NewPCG(1, 2))}
	for n := range 3000 {
		rec := &journalRecord{Run: rundb.NewObjectID(), Epoch: int64(g.int()), Seq: int64(g.int()), LastUpdated: g.time()}
		if tasks := g.sliceLen(); tasks >= 0 {
			rec.Tasks = make([]journalTask, tasks)
		}
		for i := range rec.Tasks {
			whole := g.task()
			rec.Tasks[i] = journalTask{Index: g.int(), Task: &whole}
			if g.rnd.IntN(4) == 0 { // a core beside the whole tasks
				rec.Tasks[i] = journalTask{Index: g.int(), Core: coreOf(&whole)}
			}
		}
		if g.rnd.IntN(2) == 0 {
			s := g.spsa(g.rnd.IntN(4))
			rec.SPSA = &journalSPSA{Iter: s.Iter, HistoryFrom: g.int()}
			if g.rnd.IntN(4) > 0 { // else nil thetas
				rec.SPSA.Theta = []float64{}
				for _, p := range s.Params {
					rec.SPSA.Theta = append(rec.SPSA.Theta, p.Theta)
				}
			}
			if g.rnd.IntN(2) == 0 {
				rec.SPSA.History = rundb.ParamHistory{} // no rows, as omitempty drops
			}
		}
		if !plainShaped(rec) {
			t.Fatalf("record %d left to the driver: %+v", n, rec)
		}
		got := appendShaped([]byte("stale"), rec)[len("stale"):]
		for _, flat := range []bool{false, true} {
			j := &Journal{codec: rundb.NewCodec(flat)}
			want, err := j.reflectRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("record %d, flat %v: encoded\n %x\nthe driver writes\n %x", n, flat, got, want)
			}
		}
	}
}

// The shapes the hand encoder does not write are left to the driver.
func TestJournalTaskRecordsOfOtherShapesAreLeftToTheDriver(t *testing.T) {
	inf := math.Inf(-1)
	for name, change := range map[string]func(*journalRecord){
		"a task's unknown field":        func(r *journalRecord) { r.Tasks[0].Task.Extra = rundb.Extra{"new": 1} },
		"a worker's unknown field":      func(r *journalRecord) { r.Tasks[0].Task.WorkerInfo.Extra = rundb.Extra{"new": 1} },
		"an infinite nps":               func(r *journalRecord) { r.Tasks[0].Task.WorkerInfo.NPS = inf },
		"an infinite residual":          func(r *journalRecord) { r.Tasks[0].Task.Residual = &inf },
		"an infinite residual, in core": func(r *journalRecord) { r.Tasks = []journalTask{{Core: &taskCore{Residual: &inf}}} },
		"an infinite theta":             func(r *journalRecord) { r.SPSA.Theta[0] = inf },
		"a history row":                 func(r *journalRecord) { r.SPSA.History = rundb.ParamHistory{{{Theta: 1}}} },
	} {
		task := benchTask()
		rec := &journalRecord{Tasks: []journalTask{{Task: &task}}, SPSA: &journalSPSA{Theta: []float64{1, 2}}}
		if !plainShaped(rec) {
			t.Fatalf("%s: the record before the change is left to the driver", name)
		}
		change(rec)
		if plainShaped(rec) {
			t.Errorf("%s: encoded without the driver", name)
		}
	}
}

// newTaskCases are changes about a run, and whether Record writes their records by hand as
// request_task's (appendNewTaskChange).
var newTaskCases = []struct {
	name   string
	spsa   int // parameters of the run's SPSA state, -1: none
	task   int // the task the change is about, -1: none; len: the task to come
	change func(g *taskGen, r *rundb.Run)
	fast   bool
}{
	{"a new task", -1, -1, addTask, true},
	{"a new task, named by its index", -1, len(newTaskRun.Tasks), addTask, true},
	{"a new task of an SPSA run", 3, -1, addTask, true},
	{"a new task of an SPSA run without parameters", 0, -1, addTask, true},
	{"a new task of an SPSA run of many parameters", 2 * maxStackThetas, -1, addTask, true},
	{"a new task and an SPSA step", 3, -1, func(g *taskGen, r *rundb.Run) {
		addTask(g, r)
		r.Args.SPSA.Iter++
		r.Args.SPSA.Params[1].Theta = g.float()
	}, true},
	{"a new task and a history row", 3, -1, func(g *taskGen, r *rundb.Run) {
		addTask(g, r)
		r.Args.SPSA.ParamHistory = append(r.Args.SPSA.ParamHistory, []rundb.SPSAHistoryPoint{{Theta: 1}, {}, {}})
	}, false},
	{"two new tasks", -1, -1, func(g *taskGen, r *rundb.Run) { addTask(g, r); addTask(g, r) }, false},
	{"a new task with an unknown field", -1, -1, func(g *taskGen, r *rundb.Run) {
		addTask(g, r)
		r.Tasks[len(r.Tasks)-1].Extra = rundb.Extra{"new": "field"}
	}, false},
	{"no new task", -1, -1, func(*taskGen, *rundb.Run) {}, false},
	{"an existing task changed", -1, 1, func(g *taskGen, r *rundb.Run) { r.Tasks[1] = g.task() }, false},
}

// newTaskRun is the run the cases change: two tasks.
var newTaskRun = rundb.Run{Tasks: make([]rundb.Task, 2)}

func addTask(g *taskGen, r *rundb.Run) { r.Tasks = append(r.Tasks, g.task()) }

// newTaskCaseRun is a random run as newTaskCases[c] finds it.
func newTaskCaseRun(g *taskGen, c int) *rundb.Run {
	r := &rundb.Run{ID: rundb.NewObjectID(), JournalEpoch: 7, JournalSeq: int64(g.rnd.IntN(1000)), LastUpdated: g.time()}
	for range newTaskRun.Tasks {
		r.Tasks = append(r.Tasks, g.task())
	}
	if n := newTaskCases[c].spsa; n >= 0 {
		r.Args.SPSA = g.spsa(n)
		for range g.rnd.IntN(3) {
			r.Args.SPSA.ParamHistory = append(r.Args.SPSA.ParamHistory, make([]rundb.SPSAHistoryPoint, n))
		}
	}
	return r
}

// Record's way for request_task's record (appendNewTaskChange) writes the bytes makeRecord and
// the driver's encoder write, and leaves every other record to them.
func TestRecordNewTaskEncodesAsMakeRecord(t *testing.T) {
	g := &taskGen{rnd: rand.New(rand.NewPCG(3, 4))}
	for c, tt := range newTaskCases {
		for n := range 300 {
			flat := n%2 == 0
			j := &Journal{codec: rundb.NewCodec(flat), epoch: 7}
			r := newTaskCaseRun(g, c)
			m := MarkOf(r, tt.task)
			tt.change(g, r)
			r.LastUpdated = g.time()
			got, pos, ok := j.appendNewTaskChange([]byte("stale"), r, tt.task, m)
			if ok != tt.fast {
				t.Fatalf("%s: fast %v, want %v", tt.name, ok, tt.fast)
			}
			if !ok {
				if string(got) != "stale" {
					t.Fatalf("%s: left to the driver, with %q written", tt.name, got)
				}
				continue
			}
			rec := j.makeRecord(r, tt.task, m)
			want, err := j.reflectRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[len("stale"):], want) || pos != rec.pos() {
				t.Fatalf("%s, flat %v: at %v\n %x\nthe driver writes, at %v\n %x", tt.name, flat, pos, got, rec.pos(), want)
			}
		}
	}
}

// A new task's record, read back and replayed over the run as it was, gives the run as it is.
func TestRecordNewTaskReplays(t *testing.T) {
	g := &taskGen{rnd: rand.New(rand.NewPCG(5, 6)), replayable: true}
	for c, tt := range newTaskCases {
		if !tt.fast {
			continue
		}
		for n := range 100 {
			flat := n%2 == 0
			j := &Journal{codec: rundb.NewCodec(flat), epoch: 7}
			before := newTaskCaseRun(g, c)
			after := cloneForTest(t, before)
			m := MarkOf(after, tt.task)
			tt.change(g, after)
			after.LastUpdated = before.LastUpdated.Add(time.Second)
			raw, pos, ok := j.appendNewTaskChange(nil, after, tt.task, m)
			if !ok {
				t.Fatalf("%s: left to the driver", tt.name)
			}
			_, read, err := j.decodeStored(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := applyRecord(before, read); err != nil {
				t.Fatal(err)
			}
			after.JournalEpoch, after.JournalSeq = pos.Epoch, pos.Seq
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("%s, flat %v: replayed\n %+v, want\n %+v", tt.name, flat, before, after)
			}
		}
	}
}

// TestHandEncodedTypesKeepTheirFields holds the fields of every type the hand encoder
// (encode.go) writes to the list it writes. The byte-equality tests compare it with the
// driver only over the fields their generator fills: a field added to one of these types would
// be stored by the driver's path and silently dropped by the hand-written one. If this fails,
// add the field to encode.go (in the type's order) and to taskGen, then to this list.
func TestHandEncodedTypesKeepTheirFields(t *testing.T) {
	want := map[reflect.Type]string{
		reflect.TypeFor[rundb.Task]():       "num_games active last_updated start stats worker_info bad spsa_params task_id residual residual_color ,inline",
		reflect.TypeFor[rundb.WorkerInfo](): "uname architecture concurrency max_memory min_threads username version python_version gcc_version compiler unique_key modified worker_arch ARCH nps near_github_api_limit remote_addr country_code ,inline",
		reflect.TypeFor[rundb.Results]():    "wins losses draws crashes time_losses pentanomial,omitempty",
		reflect.TypeFor[rundb.SPSAParams](): "iter packed_flips",
		reflect.TypeFor[taskCore]():         "num_games active last_updated start stats bad,omitempty spsa_params,omitempty task_id,omitempty residual,omitempty residual_color,omitempty",
		reflect.TypeFor[journalSPSA]():      "iter theta history_from history,omitempty",
	}
	for typ, fields := range want {
		var got []string
		for f := range typ.Fields() {
			if tag, ok := f.Tag.Lookup("bson"); ok && tag != "-" {
				got = append(got, tag)
			}
		}
		if g := strings.Join(got, " "); !sameFields(g, fields) {
			t.Errorf("%v's bson fields are now\n\t%s\nthe journal's hand encoder writes\n\t%s", typ, g, fields)
		}
	}
}

// sameFields compares two lists of bson tags by name, ignoring options other than inline and
// omitempty's presence where the list gives it.
func sameFields(got, want string) bool {
	g, w := strings.Fields(got), strings.Fields(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		name, _, _ := strings.Cut(g[i], ",")
		wname, wopts, _ := strings.Cut(w[i], ",")
		if name != wname || (wopts != "" && !strings.Contains(g[i], wopts)) {
			return false
		}
	}
	return true
}
