package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// testProfile is a CPU profile of 0.1 s: 30 ms in main.inl, inlined into main.a, called by
// main.b; 70 ms in main.rec, which recursed, also called by main.b.
func testProfile() *profile.Profile {
	fn := map[string]*profile.Function{}
	var fns []*profile.Function
	for i, name := range []string{"main.inl", "main.a", "main.b", "main.rec"} {
		f := &profile.Function{ID: uint64(i + 1), Name: name}
		fn[name] = f
		fns = append(fns, f)
	}
	inlined := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn["main.inl"]}, {Function: fn["main.a"]}}}
	caller := &profile.Location{ID: 2, Line: []profile.Line{{Function: fn["main.b"]}}}
	rec := &profile.Location{ID: 3, Line: []profile.Line{{Function: fn["main.rec"]}}}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{inlined, caller}, Value: []int64{3, 30e6}},
			{Location: []*profile.Location{rec, rec, caller}, Value: []int64{7, 70e6}},
		},
		Location: []*profile.Location{inlined, caller, rec},
		Function: fns,
	}
}

func TestTopFunctions(t *testing.T) {
	secs, top := topFunctions(testProfile(), 10)
	if secs != 0.1 {
		t.Errorf("sampled %v s, want 0.1", secs)
	}
	want := []profileLine{
		{Function: "main.b", FlatPct: 0, CumPct: 100, CumSeconds: 0.1},
		{Function: "main.rec", FlatPct: 70, CumPct: 70, CumSeconds: 0.07}, // counted once however deep
		{Function: "main.a", FlatPct: 0, CumPct: 30, CumSeconds: 0.03},    // ties in name order
		{Function: "main.inl", FlatPct: 30, CumPct: 30, CumSeconds: 0.03}, // the inlined leaf is the flat one
	}
	if len(top) != len(want) {
		t.Fatalf("top %+v, want %+v", top, want)
	}
	for i := range want {
		if top[i] != want[i] {
			t.Errorf("top[%d] = %+v, want %+v", i, top[i], want[i])
		}
	}
	if _, top := topFunctions(testProfile(), 2); len(top) != 2 || top[1].Function != "main.rec" {
		t.Errorf("the top 2: %+v", top)
	}
	if secs, top := topFunctions(&profile.Profile{SampleType: testProfile().SampleType}, 10); secs != 0 || top != nil {
		t.Errorf("an empty profile: %v s, %+v", secs, top)
	}
}

func TestPct(t *testing.T) {
	for _, tc := range []struct {
		v, total int64
		want     float64
	}{{1, 3, 33.3}, {2, 3, 66.7}, {3, 3, 100}, {0, 7, 0}} {
		if got := pct(tc.v, tc.total); got != tc.want {
			t.Errorf("pct(%d, %d) = %v, want %v", tc.v, tc.total, got, tc.want)
		}
	}
}

func TestSummariseCPU(t *testing.T) {
	var buf bytes.Buffer
	if err := testProfile().Write(&buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "steady-cpu.pprof")
	sum := &profileSummary{}
	summariseCPU(sum, file, buf.Bytes())
	if sum.Error != "" || sum.CPUFile != file || sum.CPUSamples != 0.1 || len(sum.Top) != 4 || sum.Top[0].Function != "main.b" {
		t.Errorf("summary %+v", sum)
	}
	if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, buf.Bytes()) {
		t.Errorf("the profile file: %v", err)
	}

	bad := &profileSummary{}
	summariseCPU(bad, filepath.Join(t.TempDir(), "bad.pprof"), []byte("not a profile"))
	if !strings.HasPrefix(bad.Error, "parse CPU profile: ") || bad.Top != nil {
		t.Errorf("a broken profile's summary: %+v", bad)
	}
}

func TestProfileMarkdown(t *testing.T) {
	var b strings.Builder
	profileMarkdown(&b, "Server", nil)
	if b.Len() != 0 {
		t.Errorf("no profile writes %q, want nothing", b.String())
	}
	profileMarkdown(&b, "Server", &profileSummary{CPUFile: "/x/ceiling-cpu.pprof", Seconds: 2, CPUSamples: 1.25,
		Top: []profileLine{{Function: "main.b", FlatPct: 1, CumPct: 99.5}}})
	want := "\n**Server CPU profile** (2 s profiled, 1.2 CPU s sampled; `go tool pprof ceiling-cpu.pprof`)\n\n" +
		"| Function | Cumulative | Flat |\n|---|---:|---:|\n| `main.b` | 99.5 % | 1.0 % |\n"
	if b.String() != want {
		t.Errorf("profile section:\n%q\nwant\n%q", b.String(), want)
	}
}

// With profiles off, or a delay cut short, profileLater delivers nil without capturing.
func TestProfileLaterWithoutProfiles(t *testing.T) {
	capture := func() *profileSummary {
		t.Error("captured with profiles off")
		return &profileSummary{}
	}
	if p := <-profileLater(context.Background(), plan{}, time.Hour, capture); p != nil {
		t.Errorf("profiles off: %+v, want nil", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if p := <-profileLater(ctx, plan{profiles: t.TempDir()}, time.Hour, capture); p != nil {
		t.Errorf("cancelled: %+v, want nil", p)
	}
	got := <-profileLater(context.Background(), plan{profiles: t.TempDir()}, 0, func() *profileSummary { return &profileSummary{Seconds: 3} })
	if got == nil || got.Seconds != 3 {
		t.Errorf("profileLater delivered %+v, want the capture's summary", got)
	}
}

// The fleet's profiles hold a CPU profile, its heap and, unless the scenario is judged over its whole
// run, an execution trace of the same window as the server's, to line the two up.
func TestCaptureFleet(t *testing.T) {
	for _, traced := range []bool{true, false} {
		dir := t.TempDir()
		sum := captureFleet(context.Background(), dir, "steady", 200*time.Millisecond, traced)
		if sum.Error != "" {
			t.Fatalf("traced %v: %s", traced, sum.Error)
		}
		if _, err := os.Stat(filepath.Join(dir, "steady-fleet-cpu.pprof")); err != nil {
			t.Errorf("traced %v: no CPU profile: %v", traced, err)
		}
		if heap, err := os.ReadFile(filepath.Join(dir, "steady-fleet-heap.pprof")); err != nil {
			t.Errorf("traced %v: no heap profile: %v", traced, err)
		} else if _, err := profile.ParseData(heap); err != nil {
			t.Errorf("traced %v: the heap profile does not parse: %v", traced, err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "steady-fleet.trace"))
		switch {
		case traced && err != nil:
			t.Errorf("no fleet trace: %v", err)
		case traced && !bytes.HasPrefix(data, []byte("go 1.")):
			t.Errorf("the fleet trace is not an execution trace: %q", data[:min(len(data), 16)])
		case !traced && err == nil:
			t.Errorf("a fleet trace was taken where none was asked for")
		}
	}
}
