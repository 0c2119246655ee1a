package api

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/stats"
)

// maxCalcGames is the largest number of games /api/calc_elo analyses, as in fishtest.
const maxCalcGames = 1 << 32

// countPattern is a whole number of games.
var countPattern = regexp.MustCompile(`^[0-9]+$`)

// eloPattern is what fishtest lets through as an Elo bound: digits, dots and minus signs. Shoal
// then requires it to parse as a number rather than failing with a 500.
var eloPattern = regexp.MustCompile(`^[0-9.-]+$`)

// param returns the last value of a query parameter, as fishtest reads a repeated one.
func param(q url.Values, name string) (string, bool) {
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// counts reads the named game counts from the query; the error names the first bad one.
func counts(q url.Values, names []string) ([]int, error) {
	out := make([]int, len(names))
	for i, name := range names {
		v, _ := param(q, name)
		switch {
		case v == "":
			return nil, fmt.Errorf("%s is missing", name)
		case !countPattern.MatchString(v):
			return nil, fmt.Errorf("%s=%q is not a whole non-negative number", name, v)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > maxCalcGames {
			return nil, fmt.Errorf("%s=%q is too large", name, v)
		}
		out[i] = int(n)
	}
	return out, nil
}

func anyPresent(q url.Values, names []string) bool {
	for _, n := range names {
		if q.Has(n) {
			return true
		}
	}
	return false
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// CalcElo is GET /api/calc_elo: the Elo of trinomial (W, D, L) or pentanomial (LL, LD, DDWL, WD,
// WW) results, and with elo0 and elo1 the SPRT Elo estimate for those bounds, answering exactly
// what fishtest answers. Where fishtest fails with a 500 (a count that is not an integer, an
// unparsable bound, results its statistics cannot handle), Shoal answers 400 and names the
// problem.
func (s *Server) CalcElo(c *gin.Context) {
	q := c.Request.URL.Query()
	const badParams = "Invalid or missing parameters. Please provide all values as valid numbers. "
	ptnmlNames, wdlNames := []string{"LL", "LD", "DDWL", "WD", "WW"}, []string{"W", "D", "L"}

	var r stats.Results
	ptnml, errPtnml := counts(q, ptnmlNames)
	if errPtnml == nil {
		r.Pentanomial = ptnml
		if sum(ptnml)*2 > maxCalcGames {
			Error(c, http.StatusBadRequest, "Number of games exceeds the limit.")
			return
		}
		if sum(ptnml) == 0 {
			Error(c, http.StatusBadRequest, "No games to calculate Elo.")
			return
		}
	} else {
		wdl, err := counts(q, wdlNames)
		if err != nil {
			if anyPresent(q, ptnmlNames) && !anyPresent(q, wdlNames) {
				err = errPtnml
			}
			Error(c, http.StatusBadRequest, badParams+err.Error()+".")
			return
		}
		r.Wins, r.Draws, r.Losses = wdl[0], wdl[1], wdl[2]
		if sum(wdl) > maxCalcGames {
			Error(c, http.StatusBadRequest, "Number of games exceeds the limit.")
			return
		}
		if sum(wdl) == 0 {
			Error(c, http.StatusBadRequest, "No games to calculate Elo.")
			return
		}
	}

	elo0s, _ := param(q, "elo0")
	elo1s, _ := param(q, "elo1")
	if elo0s == "" || elo1s == "" { // fixed games
		cells := r.Pentanomial
		if cells == nil {
			cells = []int{r.Losses, r.Draws, r.Wins}
		}
		e, err := stats.GetElo(cells)
		if err != nil || !finite(e.Elo, e.Elo95, e.LOS) {
			Error(c, http.StatusBadRequest, "These results cannot be analysed.")
			return
		}
		c.JSON(http.StatusOK, protocol.EloReply{Elo: e.Elo, CI: [2]float64{e.Elo - e.Elo95, e.Elo + e.Elo95}, LOS: e.LOS})
		return
	}

	const badElo = "Bad elo0, and elo1 values. "
	bounds := make([]float64, 2)
	for i, p := range []struct{ name, value string }{{"elo0", elo0s}, {"elo1", elo1s}} {
		x, err := strconv.ParseFloat(p.value, 64)
		if !eloPattern.MatchString(p.value) || err != nil {
			Error(c, http.StatusBadRequest, fmt.Sprintf("%s%s=%q is not a number.", badElo, p.name, p.value))
			return
		}
		if math.Abs(x) > 10 {
			Error(c, http.StatusBadRequest, fmt.Sprintf("%s%s=%s is outside [-10, 10].", badElo, p.name, p.value))
			return
		}
		bounds[i] = x
	}
	if bounds[1] < bounds[0]+0.5 {
		Error(c, http.StatusBadRequest, fmt.Sprintf("%selo1=%s must be at least elo0 + 0.5.", badElo, elo1s))
		return
	}
	model := stats.ModelNormalized
	if v, ok := param(q, "elo_model"); ok {
		model = v
	}
	switch model {
	case stats.ModelBayesElo, stats.ModelLogistic, stats.ModelNormalized:
	default:
		Error(c, http.StatusBadRequest, fmt.Sprintf("Valid Elo models are: BayesElo, logistic, and normalized. Got %q.", model))
		return
	}
	e, err := stats.EstimateSPRTElo(r, 0.05, 0.05, 0.05, bounds[0], bounds[1], model)
	if err != nil {
		Error(c, http.StatusBadRequest, "These results cannot be analysed: "+err.Error()+".")
		return
	}
	c.JSON(http.StatusOK, e)
}

func finite(xs ...float64) bool {
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}
