package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

func newMeteredServer(t *testing.T) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
		Metrics: metrics.New(reg), Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// scrape is a GET /metrics from a Prometheus on this machine.
func scrape(s *Server, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:9090"
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}

func TestRequestMetricsByRouteAndStatus(t *testing.T) {
	s, reg := newMeteredServer(t)
	for range 2 {
		if w := servertest.Do(s.Handler(), http.MethodGet, "/healthz"); w.Code != http.StatusOK {
			t.Fatalf("GET /healthz = %d", w.Code)
		}
	}
	if w := servertest.Do(s.Handler(), http.MethodGet, "/no/such/page"); w.Code != http.StatusNotFound {
		t.Fatalf("GET /no/such/page = %d", w.Code)
	}
	if w := servertest.Do(s.Handler(), http.MethodGet, "/tests/view/0123456789abcdef01234567"); w.Code == 0 {
		t.Fatal("no answer")
	}

	// The scrape shows every request before it, by route template, and not itself.
	w := scrape(s)
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	body := w.Body.String()
	for _, line := range []string{
		`shoal_http_requests_total{code="200",method="GET",route="/healthz"} 2`,
		`shoal_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`shoal_http_request_duration_seconds_count{code="200",method="GET",route="/healthz"} 2`,
		`route="/tests/view/:id"`,
		"# TYPE shoal_scheduler_tasks_assigned_total counter",
	} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(body, `route="/metrics"`) || strings.Contains(body, "0123456789abcdef01234567") {
		t.Errorf("/metrics counted itself or a raw path:\n%s", body)
	}

	// Once shutdown begins, refusals are counted under their route.
	s.BeginShutdown()
	if w := servertest.Do(s.Handler(), http.MethodGet, "/healthz"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("GET /healthz during shutdown = %d", w.Code)
	}
	want := `
# HELP shoal_http_requests_total HTTP requests answered, by route template ("unmatched" for none), method and status code.
# TYPE shoal_http_requests_total counter
shoal_http_requests_total{code="200",method="GET",route="/healthz"} 2
shoal_http_requests_total{code="200",method="GET",route="/metrics"} 1
shoal_http_requests_total{code="404",method="GET",route="unmatched"} 1
shoal_http_requests_total{code="503",method="GET",route="/healthz"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want+viewLine(t, reg)), "shoal_http_requests_total"); err != nil {
		t.Error(err)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_http_request_duration_seconds", "route", "/healthz"); n != 3 {
		t.Errorf("latency observations of /healthz: %d, want 3", n)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_http_request_duration_seconds", "route", "unmatched", "code", "404"); n != 1 {
		t.Errorf("latency observations of the 404: %d, want 1", n)
	}
}

// viewLine is the exposition line of the one run-page request, whose status depends on the UI.
func viewLine(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "shoal_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "/tests/view/:id" {
				return `shoal_http_requests_total{code="` + labels["code"] + `",method="GET",route="/tests/view/:id"} 1` + "\n"
			}
		}
	}
	t.Fatal("no series for /tests/view/:id")
	return ""
}

func TestMetricsWithoutAGathererIsNotFound(t *testing.T) {
	s := newTestServer(t, nil)
	w := servertest.Do(s.Handler(), http.MethodGet, "/metrics")
	if w.Code != http.StatusNotFound {
		t.Fatalf("GET /metrics without a gatherer = %d, want 404", w.Code)
	}
	if !strings.Contains(w.Body.String(), "metrics are not enabled") {
		t.Errorf("body %q", w.Body)
	}
}

// Finding 12: /metrics is not public. A client elsewhere, or any client through the proxy (which
// names the real client in X-Forwarded-For), gets a 404 with no figures; a wrong token changes
// nothing; a local Prometheus, or anyone with the configured token, reads them.
func TestSecurityMetricsAreNotPublic(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
		Metrics: metrics.New(reg), Gatherer: reg, MetricsToken: "s3cret-scrape-token"})
	if err != nil {
		t.Fatal(err)
	}
	remote := func(headers ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil) // from 192.0.2.1
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	for name, w := range map[string]*httptest.ResponseRecorder{
		"a remote client":              remote(),
		"a remote client, wrong token": remote("Authorization", "Bearer guess"),
		"through the local proxy":      scrape(s, "X-Forwarded-For", "203.0.113.9"),
		"through the proxy, X-Real-IP": scrape(s, "X-Real-IP", "203.0.113.9"),
	} {
		if w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), "shoal_") {
			t.Errorf("%s: %d, %d bytes; want a 404 without figures", name, w.Code, w.Body.Len())
		}
	}
	for name, w := range map[string]*httptest.ResponseRecorder{
		"a local Prometheus":           scrape(s),
		"a remote client, right token": remote("Authorization", "Bearer s3cret-scrape-token"),
	} {
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "shoal_http_requests_total") {
			t.Errorf("%s: %d; want the figures", name, w.Code)
		}
	}
}
