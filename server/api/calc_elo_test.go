package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
)

// calcEloReference is the part of stats/testdata/sprt_reference.json (values computed by
// fishtest's own code) that /api/calc_elo answers.
type calcEloReference struct {
	GetElo []struct {
		Results []int
		Want    struct{ OK *[3]any }
	} `json:"get_elo"`
	SPRTElo []struct {
		R struct {
			Wins, Losses, Draws int
			Pentanomial         []int
		}
		Elo0, Elo1 float64
		Model      string
		Want       struct {
			OK *struct {
				A, B, Elo, LOS, LLR float64
				CI                  [2]float64
			}
		}
	} `json:"sprt_elo"`
}

func loadCalcEloReference(t *testing.T) *calcEloReference {
	t.Helper()
	b, err := os.ReadFile("../../stats/testdata/sprt_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref calcEloReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return &ref
}

func resultParams(tri []int, ptnml []int) url.Values {
	v := url.Values{}
	if ptnml != nil {
		for i, name := range []string{"LL", "LD", "DDWL", "WD", "WW"} {
			v.Set(name, fmt.Sprint(ptnml[i]))
		}
		return v
	}
	v.Set("L", fmt.Sprint(tri[0]))
	v.Set("D", fmt.Sprint(tri[1]))
	v.Set("W", fmt.Sprint(tri[2]))
	return v
}

func near(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func TestCalcEloMatchesFishtest(t *testing.T) {
	s := newTestServer(t, nil)
	ref := loadCalcEloReference(t)
	checked := 0
	for _, c := range ref.GetElo {
		var params url.Values
		if len(c.Results) == 5 {
			params = resultParams(nil, c.Results)
		} else {
			params = resultParams(c.Results, nil)
		}
		total := 0
		for _, x := range c.Results {
			total += x
		}
		if total == 0 || total*(len(c.Results)-1)/2 > 1<<32 {
			continue // refused by the endpoint's own checks, tested below
		}
		w := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?"+params.Encode())
		var got struct {
			Elo float64
			CI  [2]float64
			LOS float64
		}
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil {
			t.Errorf("%v: %d %s", c.Results, w.Code, w.Body)
			continue
		}
		elo, e95, los := c.Want.OK[0].(float64), c.Want.OK[1].(float64), c.Want.OK[2].(float64)
		if !near(got.Elo, elo, 1e-6) || !near(got.CI[0], elo-e95, 1e-6) || !near(got.CI[1], elo+e95, 1e-6) || !near(got.LOS, los, 1e-6) {
			t.Errorf("%v: got %+v, fishtest elo %g ± %g LOS %g", c.Results, got, elo, e95, los)
		}
		checked++
	}
	for _, c := range ref.SPRTElo {
		if c.Want.OK == nil || c.Elo1 < c.Elo0+0.5 || math.Abs(c.Elo0) > 10 || math.Abs(c.Elo1) > 10 {
			continue
		}
		games := c.R.Wins + c.R.Draws + c.R.Losses
		if c.R.Pentanomial != nil {
			if games > 0 {
				continue // a run's results with both shapes: the endpoint takes one or the other
			}
			for _, x := range c.R.Pentanomial {
				games += 2 * x
			}
		}
		if games == 0 || games > 1<<32 {
			continue // refused by the endpoint's own checks, tested below
		}
		params := resultParams([]int{c.R.Losses, c.R.Draws, c.R.Wins}, c.R.Pentanomial)
		params.Set("elo0", fmt.Sprint(c.Elo0))
		params.Set("elo1", fmt.Sprint(c.Elo1))
		params.Set("elo_model", c.Model)
		w := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?"+params.Encode())
		var got struct {
			A, B, Elo, LOS, LLR float64
			CI                  [2]float64
		}
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil {
			t.Errorf("%s: %d %s", params.Encode(), w.Code, w.Body)
			continue
		}
		want := c.Want.OK
		if !near(got.LLR, want.LLR, 1e-6) || !near(got.A, want.A, 1e-6) || !near(got.B, want.B, 1e-6) ||
			!near(got.Elo, want.Elo, 1e-4) || !near(got.CI[0], want.CI[0], 1e-4) || !near(got.CI[1], want.CI[1], 1e-4) ||
			!near(got.LOS, want.LOS, 1e-4) {
			t.Errorf("%s:\n got %+v\nwant %+v", params.Encode(), got, *want)
		}
		checked++
	}
	if checked < 300 {
		t.Errorf("only %d reference cases were checked", checked)
	}
	t.Logf("%d reference cases answered as fishtest does", checked)
}

func TestCalcEloShapes(t *testing.T) {
	s := newTestServer(t, nil)
	w := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?W=120&D=200&L=100")
	var fixed map[string]json.RawMessage
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &fixed) != nil || len(fixed) != 3 ||
		fixed["elo"] == nil || fixed["ci"] == nil || fixed["LOS"] == nil {
		t.Errorf("fixed games: %d %s, want exactly elo, ci and LOS", w.Code, w.Body)
	}
	w = servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?LL=10&LD=100&DDWL=300&WD=120&WW=12&elo0=0&elo1=2")
	var sprt map[string]json.RawMessage
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &sprt) != nil || len(sprt) != 6 {
		t.Errorf("SPRT: %d %s, want exactly a, b, elo, ci, LOS and LLR", w.Code, w.Body)
	}
	for _, k := range []string{"a", "b", "elo", "ci", "LOS", "LLR"} {
		if sprt[k] == nil {
			t.Errorf("SPRT reply lacks %s: %s", k, w.Body)
		}
	}
	// Only one bound means fixed games, as in fishtest.
	if w := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?W=120&D=200&L=100&elo0=0"); w.Code != http.StatusOK || strings.Contains(w.Body.String(), "LLR") {
		t.Errorf("one bound: %d %s", w.Code, w.Body)
	}
	// A repeated parameter counts with its last value, as in fishtest.
	once := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?W=100&D=1&L=1")
	twice := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?W=1&D=1&L=1&W=100")
	if once.Body.String() != twice.Body.String() {
		t.Errorf("W=1 then W=100 answered %s, W=100 alone %s", twice.Body, once.Body)
	}
	if w := servertest.Do(s.Handler(), http.MethodHead, "/api/calc_elo?W=1&D=1&L=1"); w.Code != http.StatusOK {
		t.Errorf("HEAD = %d", w.Code)
	}
}

func TestCalcEloRejectsBadInput(t *testing.T) {
	s := newTestServer(t, nil)
	for _, c := range []struct {
		name, query string
		want        string
	}{
		{"no parameters", "", "W is missing"},
		{"a missing draw count", "W=1&L=2", "D is missing"},
		{"a word", "W=ten&D=1&L=2", `W="ten" is not a whole non-negative number`},
		{"a negative count", "W=1&D=-1&L=2", `D="-1" is not a whole non-negative number`},
		{"a fraction", "W=1.5&D=1&L=2", `W="1.5"`},
		{"an incomplete pentanomial", "LL=1&LD=2&DDWL=3&WD=4", "WW is missing"},
		{"a count beyond int64", "W=99999999999999999999&D=1&L=1", "too large"},
		{"too many games", "W=4294967296&D=1&L=0", "Number of games exceeds the limit."},
		{"too many pairs", "LL=0&LD=0&DDWL=2147483649&WD=0&WW=0", "Number of games exceeds the limit."},
		{"no games", "W=0&D=0&L=0", "No games to calculate Elo."},
		{"no pairs", "LL=0&LD=0&DDWL=0&WD=0&WW=0", "No games to calculate Elo."},
		{"bounds too close", "W=10&D=10&L=10&elo0=0&elo1=0.4", "elo1=0.4 must be at least elo0 + 0.5"},
		{"a bound beyond 10", "W=10&D=10&L=10&elo0=0&elo1=11", "elo1=11 is outside [-10, 10]"},
		{"an unparsable bound", "W=10&D=10&L=10&elo0=1-2&elo1=3", `elo0="1-2" is not a number`},
		{"a bound in exponent form", "W=10&D=10&L=10&elo0=1e0&elo1=3", `elo0="1e0" is not a number`},
		{"an unknown model", "W=10&D=10&L=10&elo0=0&elo1=2&elo_model=Glicko", `Valid Elo models are: BayesElo, logistic, and normalized. Got "Glicko".`},
		{"results fishtest's statistics cannot handle", "LL=0&LD=0&DDWL=2147483648&WD=0&WW=0&elo0=0&elo1=2", "cannot be analysed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := servertest.Do(s.Handler(), http.MethodGet, "/api/calc_elo?"+c.query)
			msg, _ := servertest.APIError(t, w)
			if w.Code != http.StatusBadRequest || !strings.HasPrefix(msg, "/api/calc_elo: ") || !strings.Contains(msg, c.want) {
				t.Errorf("%d %q, want 400 mentioning %q", w.Code, msg, c.want)
			}
		})
	}
}

// FuzzCalcElo feeds arbitrary query strings to /api/calc_elo: it must always answer 200 or 400
// with valid JSON (no NaN, no panic).
func FuzzCalcElo(f *testing.F) {
	for _, q := range []string{
		"W=10&D=20&L=5", "LL=1&LD=2&DDWL=3&WD=4&WW=5&elo0=0&elo1=2", "W=0&D=0&L=1&elo0=-10&elo1=10&elo_model=BayesElo",
		"LL=0&LD=0&DDWL=2147483648&WD=0&WW=0", "W=1&D=0&L=0&elo0=0&elo1=0.5&elo_model=logistic", "elo0=..&elo1=-",
	} {
		f.Add(q)
	}
	s, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Version: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest(http.MethodGet, "/api/calc_elo", nil)
		req.URL.RawQuery = query // as it arrives off the wire, unparsed
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Fatalf("%q: status %d %s", query, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%q: invalid JSON %s", query, w.Body)
		}
	})
}
