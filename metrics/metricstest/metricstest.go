// Package metricstest reads metrics back from a registry in tests, by the names and labels
// Prometheus would scrape, for the values prometheus/testutil cannot compare exactly (the
// count of a histogram whose buckets depend on timing).
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HistogramCount returns the number of observations of histogram name, summed over the series
// whose labels include labels (name, value pairs). A metric g does not have at all (misspelt,
// or a vector without series yet) fails the test, so that a typo cannot pass for a zero.
func HistogramCount(t testing.TB, g prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range series(t, g, name, labels) {
		if m.GetHistogram() == nil {
			t.Fatalf("%s is not a histogram", name)
		}
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// Value returns the value of counter or gauge name, summed over the series whose labels include
// labels (name, value pairs). A metric g does not have at all fails the test.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	for _, m := range series(t, g, name, labels) {
		switch {
		case m.GetCounter() != nil:
			v += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v += m.GetGauge().GetValue()
		default:
			t.Fatalf("%s is neither a counter nor a gauge", name)
		}
	}
	return v
}

func series(t testing.TB, g prometheus.Gatherer, name string, labels []string) []*dto.Metric {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("labels %q: want name, value pairs", labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		var out []*dto.Metric
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				out = append(out, m)
			}
		}
		return out
	}
	t.Fatalf("no metric %s gathered (misspelt, or a vector with no series yet)", name)
	return nil
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}
