package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-chess/shoal/protocol/apiclient"
)

// scrapeMetrics reads the server's /metrics into series ("name{labels}") and values.
func scrapeMetrics(ctx context.Context, base string) (map[string]float64, error) {
	data, err := httpGet(ctx, base+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape /metrics: %w", err)
	}
	return ParseMetrics(bytes.NewReader(data))
}

// ParseMetrics reads Prometheus text into series ("name{labels}") and values.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// httpGet returns the body of url's 200 reply (a scrape or a profile, unbounded in practice);
// any other reply is an error.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	return apiclient.Get(ctx, http.DefaultClient, url, math.MaxInt64)
}

// seriesMatches says whether series ("name{labels}") is one of name's whose labels contain
// every one of labels.
func seriesMatches(series, name string, labels []string) bool {
	n, rest, _ := strings.Cut(series, "{")
	if n != name {
		return false
	}
	for _, l := range labels {
		if !strings.Contains(rest, l) {
			return false
		}
	}
	return true
}

// histQuantile is the q-quantile of a Prometheus histogram over the requests between two
// scrapes, as the upper bound of the bucket that holds it, summed over the series whose labels
// contain every one of labels.
func histQuantile(from, until map[string]float64, name string, q float64, labels ...string) (float64, bool) {
	counts := map[float64]float64{}
	for series, v := range until {
		if !seriesMatches(series, name+"_bucket", labels) {
			continue
		}
		i := strings.Index(series, `le="`)
		if i < 0 {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(series[i+4:], "}"), `"`), 64)
		if err != nil {
			continue
		}
		counts[le] += v - from[series]
	}
	les := make([]float64, 0, len(counts))
	for le := range counts {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 || counts[les[len(les)-1]] <= 0 {
		return 0, false
	}
	total := counts[les[len(les)-1]] // le="+Inf" is the last, cumulative
	for _, le := range les {
		if counts[le] >= q*total {
			return le, !math.IsInf(le, 1)
		}
	}
	return 0, false
}

// metricSum adds the series of name whose labels contain every one of labels (`reason="dead"`).
func metricSum(m map[string]float64, name string, labels ...string) float64 {
	var sum float64
	for series, v := range m {
		if seriesMatches(series, name, labels) {
			sum += v
		}
	}
	return sum
}
