package stats

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

type durationReference struct {
	Durations []struct {
		TC      string
		Seconds float64
	}
	Errors   []string
	TCRatios []struct {
		TC        string
		Threads   int
		Ratio     float64
		BatchSize int `json:"batch_size"`
	} `json:"tc_ratios"`
	RemainingHours []struct {
		Name                string
		NumGames            int `json:"num_games"`
		TC                  string
		Threads             int
		Hours               float64
		Pentanomial         []int
		Wins, Losses, Draws int
		SPRT                *struct {
			LLR, Alpha, Beta float64
			Overshoot        *struct{ M0, Sq0, M1, Sq1 float64 }
		}
	} `json:"remaining_hours"`
}

func loadDurationReference(t *testing.T) durationReference {
	var ref durationReference
	readReferenceJSON(t, "duration_reference.json", &ref)
	if len(ref.Durations) == 0 || len(ref.RemainingHours) == 0 {
		t.Fatal("duration reference is empty")
	}
	return ref
}

func TestEstimateGameDurationMatchesFishtest(t *testing.T) {
	ref := loadDurationReference(t)
	for _, c := range ref.Durations {
		t.Run(c.TC, func(t *testing.T) {
			got, err := EstimateGameDuration(c.TC)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "seconds", got, c.Seconds, tolExact)
		})
	}
	for _, tc := range ref.Errors {
		t.Run("fishtest rejects "+tc, func(t *testing.T) {
			if got, err := EstimateGameDuration(tc); err == nil {
				t.Errorf("EstimateGameDuration(%q) = %g, want an error", tc, got)
			}
		})
	}
}

func TestEstimateGameDurationRejectsMalformedControls(t *testing.T) {
	// fishtest returns a number for most of these, silently dropping the extra fields or using a
	// zero or negative time; no valid run has such a time control.
	for _, tc := range []string{
		"10+0.1+1", "1/2/3", "1:2:3+1", "-5+0.1", "10+-0.1", "0", "0+0", "0/10+0.1",
		"-40/60+0.6", "inf", "nan+1", "0x10+0.1", "10+0.1 junk", "1__0+0.1", "_10+0.1",
	} {
		t.Run(tc, func(t *testing.T) {
			got, err := EstimateGameDuration(tc)
			if err == nil {
				t.Fatalf("EstimateGameDuration(%q) = %g, want an error", tc, got)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc)) {
				t.Errorf("error %q does not quote the time control", err)
			}
		})
	}
}

func TestEstimateGameDurationWorkedValues(t *testing.T) {
	for _, c := range []struct {
		tc   string
		want float64
	}{
		{"10+0.1", 30.912},                          // the spec's worked value
		{"40/60+0.6", (60*68.0/40 + 0.6*68) * 1.84}, // repeating control scaled to 68 moves
		{"1:30+1", (90 + 68) * 1.84},
	} {
		t.Run(c.tc, func(t *testing.T) {
			got, err := EstimateGameDuration(c.tc)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "seconds", got, c.want, tolerance{rel: 1e-12})
		})
	}
}

func TestTCRatioAndBatchSizeMatchFishtest(t *testing.T) {
	for _, c := range loadDurationReference(t).TCRatios {
		t.Run(fmt.Sprintf("%s with %d threads", c.TC, c.Threads), func(t *testing.T) {
			got, err := TCRatio(c.TC, c.Threads)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "ratio", got, c.Ratio, tolExact)
			if b := SPRTBatchSize(got); b != c.BatchSize {
				t.Errorf("SPRTBatchSize(%g) = %d, fishtest %d", got, b, c.BatchSize)
			}
		})
	}
}

func TestTCRatioRejectsMalformedControl(t *testing.T) {
	if got, err := TCRatio("10+", 1); err == nil {
		t.Errorf("TCRatio(\"10+\") = %g, want an error", got)
	}
}

func TestSPRTBatchSizeOfDegenerateRatios(t *testing.T) {
	for _, c := range []struct {
		name  string
		ratio float64
		want  int
	}{
		{"zero ratio", 0, 1},
		{"negative ratio", -2, 1},
		{"NaN ratio", math.NaN(), 1},
		{"infinite ratio", math.Inf(1), 1},
		{"very long control", 1000, 1},
		{"twice STC", 2, 8},
		{"LTC", 6, 3},
		{"tiny ratio saturates", 1e-300, math.MaxInt32},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := SPRTBatchSize(c.ratio); got != c.want {
				t.Errorf("SPRTBatchSize(%g) = %d, want %d", c.ratio, got, c.want)
			}
		})
	}
}

func TestRemainingHoursMatchesFishtest(t *testing.T) {
	for _, c := range loadDurationReference(t).RemainingHours {
		t.Run(c.Name, func(t *testing.T) {
			in := RemainingInput{
				Pentanomial: c.Pentanomial,
				Wins:        c.Wins, Losses: c.Losses, Draws: c.Draws,
				NumGames: c.NumGames, TC: c.TC, Threads: c.Threads,
			}
			if s := c.SPRT; s != nil {
				in.SPRT = &SPRT{LLR: s.LLR, Alpha: s.Alpha, Beta: s.Beta}
				if o := s.Overshoot; o != nil {
					in.SPRT.Overshoot = &Overshoot{M0: o.M0, Sq0: o.Sq0, M1: o.M1, Sq1: o.Sq1}
				}
			}
			got, err := RemainingHours(in)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "hours", got, c.Hours, tolExact)
		})
	}
}

func TestRemainingHoursEdgeCases(t *testing.T) {
	sprt := func(llr float64) *SPRT { return &SPRT{LLR: llr, Alpha: 0.05, Beta: 0.05} }
	for _, c := range []struct {
		name string
		in   RemainingInput
		want float64
	}{
		{"missing threads count as one",
			RemainingInput{NumGames: 1000, TC: "10+0.1"}, 30.912 * 1000 / 3600},
		{"threads multiply the hours",
			RemainingInput{NumGames: 1000, TC: "10+0.1", Threads: 4}, 4 * 30.912 * 1000 / 3600},
		{"finished fixed-games run needs nothing",
			RemainingInput{Wins: 600, Losses: 300, Draws: 100, NumGames: 1000, TC: "10+0.1"}, 0},
		{"SPRT past its upper bound needs nothing",
			RemainingInput{SPRT: sprt(2.95), Pentanomial: []int{1, 2, 3, 2, 1}, NumGames: 800000, TC: "10+0.1"}, 0},
		{"SPRT past its lower bound needs nothing",
			RemainingInput{SPRT: sprt(-3), Pentanomial: []int{1, 2, 3, 2, 1}, NumGames: 800000, TC: "10+0.1"}, 0},
		{"fresh SPRT is expected to take the average length",
			RemainingInput{SPRT: sprt(0), NumGames: 800000, TC: "10+0.1"}, 30.912 * 95000 / 3600},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := RemainingHours(c.in)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "hours", got, c.want, tolerance{rel: 1e-12})
		})
	}
}

func TestRemainingHoursRejectsMalformedTC(t *testing.T) {
	for _, in := range []RemainingInput{
		{NumGames: 1000, TC: "ten"},
		{SPRT: &SPRT{LLR: 3, Alpha: 0.05, Beta: 0.05}, NumGames: 800000, TC: "10+x"},
	} {
		if got, err := RemainingHours(in); err == nil {
			t.Errorf("RemainingHours(%+v) = %g, want an error", in, got)
		}
	}
}
