package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-chess/shoal/metrics"
)

// dashboardFile is the Grafana dashboard operators import.
var dashboardFile = filepath.Join("..", "configs", "grafana-dashboard.json")

// dashboard is the part of Grafana's dashboard model the checks below read. Numbers are
// json.Number so that a float where Grafana wants an integer is caught.
type dashboard struct {
	Title         string      `json:"title"`
	UID           string      `json:"uid"`
	SchemaVersion json.Number `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         json.Number `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y json.Number
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// gridWidth is the width of Grafana's grid.
const gridWidth = 24

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not a dashboard: %v", dashboardFile, err)
	}
	return d
}

func intOf(t *testing.T, what string, n json.Number) int {
	t.Helper()
	v, err := strconv.Atoi(string(n))
	if err != nil {
		t.Errorf("%s = %q, want an integer", what, n)
	}
	return v
}

// TestDashboardImports checks what Grafana needs to import the dashboard: a title, a uid, a
// schema version, a Prometheus data source variable, and panels with unique ids, places on the
// grid that do not overlap, and queries with a refId and an expression.
func TestDashboardImports(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || len(d.UID) > 40 {
		t.Errorf("title %q, uid %q: both needed, the uid at most 40 characters", d.Title, d.UID)
	}
	if v := intOf(t, "schemaVersion", d.SchemaVersion); v < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (the Grafana 9+ model)", v)
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	hasDatasource := false
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasource = true
		}
	}
	if !hasDatasource {
		t.Error(`no "datasource" variable of type datasource for Prometheus`)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}

	type rect struct {
		name       string
		x, y, w, h int
	}
	var rects []rect
	ids := map[int]string{}
	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	for _, p := range all {
		name := strconv.Quote(p.Title)
		id := intOf(t, name+" id", p.ID)
		if other, dup := ids[id]; dup || id <= 0 {
			t.Errorf("panel %s: id %d is not positive or also %s's", name, id, other)
		}
		ids[id] = name
		if p.Title == "" {
			t.Errorf("panel %d has no title", id)
		}
		if !slices.Contains([]string{"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "heatmap"}, p.Type) {
			t.Errorf("panel %s: unknown type %q", name, p.Type)
		}
		if p.GridPos == nil {
			t.Errorf("panel %s has no gridPos", name)
			continue
		}
		r := rect{name, intOf(t, name+" x", p.GridPos.X), intOf(t, name+" y", p.GridPos.Y),
			intOf(t, name+" w", p.GridPos.W), intOf(t, name+" h", p.GridPos.H)}
		if r.w <= 0 || r.h <= 0 || r.x < 0 || r.y < 0 || r.x+r.w > gridWidth {
			t.Errorf("panel %s: gridPos %+v is off the %d-column grid", name, r, gridWidth)
		}
		for _, o := range rects {
			if r.x < o.x+o.w && o.x < r.x+r.w && r.y < o.y+o.h && o.y < r.y+r.h {
				t.Errorf("panels %s and %s overlap", name, o.name)
			}
		}
		rects = append(rects, r)
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %s has no queries", name)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %s: datasource %+v, want the ${datasource} variable", name, p.Datasource)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %s: query refId %q missing or repeated", name, q.RefID)
			}
			refs[q.RefID] = true
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %s: query %s has no expression", name, q.RefID)
			}
			if q.Datasource != nil && q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %s: query %s has datasource %+v", name, q.RefID, q.Datasource)
			}
			if !balanced(q.Expr) {
				t.Errorf("panel %s: unbalanced brackets in %s", name, q.Expr)
			}
			for _, m := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(q.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %s: %s uses undefined variable $%s", name, q.RefID, m[1])
				}
			}
		}
	}
}

// TestDashboardShowsEveryMetric checks that every metric a dashboard query names is one that
// metrics.New registers (a histogram by its _bucket, _sum or _count series), that counters and
// histogram buckets are only read through rate(), and that every registered metric is on the
// dashboard.
func TestDashboardShowsEveryMetric(t *testing.T) {
	registered := registeredMetrics(t)
	shown := map[string]bool{}
	name := regexp.MustCompile(`shoal_[a-z0-9_]+`)
	for _, p := range loadDashboard(t).Panels {
		for _, q := range p.Targets {
			for _, loc := range name.FindAllStringIndex(q.Expr, -1) {
				series := q.Expr[loc[0]:loc[1]]
				metric, typ := series, registered[series]
				if typ == nil {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						base := strings.TrimSuffix(series, suffix)
						if base != series && registered[base] != nil && *registered[base] == dto.MetricType_HISTOGRAM {
							metric, typ = base, registered[base]
						}
					}
				}
				if typ == nil {
					t.Errorf("panel %q: %s is not a metric metrics.New registers", p.Title, series)
					continue
				}
				shown[metric] = true
				cumulative := *typ == dto.MetricType_COUNTER || strings.HasSuffix(series, "_bucket")
				inRate := regexp.MustCompile(`rate\(\s*$`).MatchString(q.Expr[:loc[0]])
				if cumulative != inRate {
					t.Errorf("panel %q: %s (%s) inside rate() = %v; counters and buckets need rate(), gauges must not have it",
						p.Title, series, typ, inRate)
				}
			}
		}
	}
	for m := range registered {
		if !shown[m] {
			t.Errorf("%s is on no dashboard panel", m)
		}
	}
}

// registeredMetrics returns every metric metrics.New registers, with its type: the names from
// the collectors' descriptions (vectors included, series or not), the types from a gathering
// after each method was called once.
func registeredMetrics(t *testing.T) map[string]*dto.MetricType {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &recordingRegisterer{Registerer: reg}
	touchAll(metrics.New(rec))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricType{}
	for _, f := range families {
		out[f.GetName()] = f.Type
	}
	for _, n := range rec.names {
		if out[n] == nil {
			t.Errorf("%s is registered but has no series after touchAll; call its method there", n)
		}
	}
	if len(out) != len(rec.names) {
		t.Errorf("gathered %d metrics, described %d", len(out), len(rec.names))
	}
	return out
}

// recordingRegisterer notes the name of every metric registered through it.
type recordingRegisterer struct {
	prometheus.Registerer
	names []string
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// balanced reports whether the brackets of a PromQL expression pair up (quoted strings aside).
func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, c := range expr {
		switch {
		case c == '"':
			inQuote = !inQuote
		case inQuote:
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case pairs[c] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inQuote
}
