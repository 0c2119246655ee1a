package runs_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/ui/runs"
)

const (
	formShaBase = "1111111111111111111111111111111111111111"
	formShaNew  = "2222222222222222222222222222222222222222"
)

// runFormValues is a complete SPRT submission, as the form posts it with the STC preset.
func runFormValues() url.Values {
	return url.Values{
		"tests-repo": {"https://github.com/alice/Stockfish"}, "test-branch": {"patch"}, "base-branch": {"master"},
		"resolved_new": {formShaNew}, "resolved_base": {formShaBase},
		"test-signature": {"2061234"}, "base-signature": {"2050811"},
		"new-options": {"Hash=16"}, "base-options": {"Hash=16"}, "run-info": {"try a patch"},
		"stop_rule": {"sprt"}, "bounds": {"stc"}, "sprt_elo0": {"0"}, "sprt_elo1": {"2"}, "elo_model": {"normalized"},
		"num-games": {"60000"}, "spsa_A": {"0.1"}, "spsa_alpha": {"0.602"}, "spsa_gamma": {"0.101"}, "spsa_raw_params": {""},
		"tc": {"10+0.1"}, "new_tc": {"10+0.1"}, "threads": {"1"}, "priority": {"0"}, "throughput": {"100"},
		"book": {"UHO_Lichess_4852_v1.epd"}, "book-depth": {"8"}, "arch-filter": {""}, "compiler": {"clang++"},
		"msg_base": {""}, "msg_new": {""},
	}
}

// formWith returns a copy of v with the given name/value pairs set ("" values are set, not removed).
func formWith(v url.Values, kv ...string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Set(kv[i], kv[i+1])
	}
	return out
}

// formInputValue returns the value of the page's input (or textarea) named name, unescaped, and
// whether there is one.
func formInputValue(page, name string) (string, bool) {
	q := regexp.QuoteMeta(name)
	if m := regexp.MustCompile(`<input[^>]*\sname="` + q + `"[^>]*\svalue="([^"]*)"`).FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1]), true
	}
	if m := regexp.MustCompile(`<textarea[^>]*\sname="` + q + `"[^>]*>([^<]*)</textarea>`).FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1]), true
	}
	return "", false
}

// formChecked reports whether the page's checkbox or radio name (with value, if given) is checked.
func formChecked(page, name, value string) bool {
	pat := `<input[^>]*\sname="` + regexp.QuoteMeta(name) + `"`
	if value != "" {
		pat += ` value="` + regexp.QuoteMeta(value) + `"`
	}
	return regexp.MustCompile(pat + `[^>]*\schecked`).MatchString(page)
}

// formSelected reports whether option value of the page's select is selected.
func formSelected(page, value string) bool {
	return strings.Contains(page, `<option value="`+value+`" selected`)
}

// formMarked reports whether the form marks field as wrong: its message and the invalid input.
func formMarked(page, field string) bool {
	return strings.Contains(page, `id="err-`+field+`"`) && strings.Contains(page, `aria-describedby="err-`+field+`"`)
}

func (e *uiEnv) runCount() int {
	e.T.Helper()
	runs, err := e.DB.Runs.Unfinished(context.Background())
	if err != nil {
		e.T.Fatal(err)
	}
	return len(runs)
}

// submittedRun reads the run a successful submission redirected to.
func (e *uiEnv) submittedRun(w interface{ Header() http.Header }) *rundb.Run {
	e.T.Helper()
	loc := w.Header().Get("Location")
	m := regexp.MustCompile(`^/tests/view/([0-9a-f]{24})\?follow=1$`).FindStringSubmatch(loc)
	if m == nil {
		e.T.Fatalf("redirected to %q, want /tests/view/<id>?follow=1", loc)
	}
	id, _ := rundb.ParseObjectID(m[1])
	r, err := e.Sched.Snapshot(context.Background(), id)
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// runOf stores an SPRT run of username, unapproved.
func (e *uiEnv) runOf(username string) *rundb.Run {
	e.T.Helper()
	zero, two := 0.0, 2.0
	r, err := e.Sched.CreateRun(context.Background(), protocol.RunRequest{
		BaseTag: "master", NewTag: "patch-" + username, ResolvedBase: formShaBase, ResolvedNew: formShaNew,
		TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16",
		BaseSignature: "2050811", NewSignature: "2061234",
		TestsRepo: "https://github.com/" + username + "/Stockfish", Info: "a test of " + username,
		SPRT: &protocol.SPRTRequest{Elo0: &zero, Elo1: &two},
	}, username)
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

func (e *uiEnv) runNow(id rundb.ObjectID) *rundb.Run {
	e.T.Helper()
	r, err := e.Sched.Snapshot(context.Background(), id)
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// flashPage returns the page a browser sees next, where its flash messages are shown.
func (b *browser) flashPage() string { return body(b.Get("/tests/run")) }

func TestUIRunFormPage(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")

	t.Run("anonymous goes to the login page", func(t *testing.T) {
		w := env.anon().Get("/tests/run?preset=ltc")
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next="+url.QueryEscape("/tests/run?preset=ltc") {
			t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
		}
	})

	t.Run("the form has every field and preset", func(t *testing.T) {
		w := alice.Get("/tests/run")
		page := body(w)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d\n%s", w.Code, page)
		}
		for _, name := range []string{"base-branch", "test-branch", "tc", "new_tc", "odds", "book", "book-depth",
			"base-signature", "test-signature", "base-options", "new-options", "tests-repo", "run-info", "stop_rule",
			"sprt_elo0", "sprt_elo1", "elo_model", "num-games", "threads", "priority", "throughput", "auto-purge",
			"adjudication", "checkbox-arch-filter", "arch-filter", "checkbox-compiler", "compiler", "spsa_A",
			"spsa_alpha", "spsa_gamma", "spsa_raw_params", "resolved_base", "resolved_new", "bounds", "csrf_token"} {
			if !strings.Contains(page, `name="`+name+`"`) {
				t.Errorf("no field %s", name)
			}
		}
		for _, p := range []string{"stc", "ltc", "stc-smp", "ltc-smp", "vltc", "vltc-smp", "pt", "pt-smp"} {
			if !strings.Contains(page, `href="/tests/run?preset=`+p+`"`) {
				t.Errorf("no preset link %s", p)
			}
		}
		for _, b := range []string{"stc", "ltc", "nonreg-stc", "nonreg-ltc", "custom"} {
			if !strings.Contains(page, `<option value="`+b+`"`) {
				t.Errorf("no bounds choice %s", b)
			}
		}
		if !strings.Contains(page, `src="/static/runform.js"`) || strings.Contains(page, "<script>") {
			t.Errorf("the script must come from /static/runform.js, never inline")
		}
		// A new test starts as STC with the standard bounds.
		if v, _ := formInputValue(page, "tc"); v != "10+0.1" {
			t.Errorf("tc %q", v)
		}
		if !formChecked(page, "stop_rule", "sprt") || !formSelected(page, "stc") {
			t.Errorf("a new test is not SPRT with the standard STC bounds")
		}
		// The box disables adjudication, which is on by default.
		if formChecked(page, "adjudication", "") || formChecked(page, "auto-purge", "") {
			t.Errorf("adjudication off or auto-purge on by default")
		}
		if strings.Contains(page, `name="rescheduled_from"`) {
			t.Errorf("a new test is not rescheduled from anything")
		}
	})

	t.Run("presets prefill on the server", func(t *testing.T) {
		tests := []struct {
			preset, tc, threads, hash, throughput string
		}{
			{"stc", "10+0.1", "1", "Hash=16", "100"},
			{"ltc", "60+0.6", "1", "Hash=64", "100"},
			{"stc-smp", "5+0.05", "8", "Hash=64", "100"},
			{"ltc-smp", "20+0.2", "8", "Hash=256", "100"},
			{"vltc", "180+1.8", "1", "Hash=192", "50"},
			{"vltc-smp", "60+0.6", "8", "Hash=512", "50"},
		}
		for _, tc := range tests {
			w := alice.Get("/tests/run?preset=" + tc.preset)
			page := body(w)
			if w.Code != http.StatusOK {
				t.Fatalf("%s: status %d", tc.preset, w.Code)
			}
			for field, want := range map[string]string{"tc": tc.tc, "new_tc": tc.tc, "threads": tc.threads,
				"new-options": tc.hash, "base-options": tc.hash, "throughput": tc.throughput} {
				if got, _ := formInputValue(page, field); got != want {
					t.Errorf("%s: %s = %q, want %q", tc.preset, field, got, want)
				}
			}
			if !formChecked(page, "stop_rule", "sprt") {
				t.Errorf("%s: not SPRT", tc.preset)
			}
			if !strings.Contains(page, `class="preset current" aria-current="true"`) ||
				!regexp.MustCompile(`href="/tests/run\?preset=`+tc.preset+`" class="preset current"`).MatchString(page) {
				t.Errorf("%s: not shown as the current preset", tc.preset)
			}
		}
		page := body(alice.Get("/tests/run?preset=ltc"))
		if !formSelected(page, "ltc") {
			t.Errorf("LTC preset without the LTC bounds")
		}
		if v, _ := formInputValue(page, "sprt_elo0"); v != "0.5" {
			t.Errorf("LTC elo0 %q", v)
		}
	})

	t.Run("progression test preset", func(t *testing.T) {
		page := body(alice.Get("/tests/run?preset=pt-smp"))
		for field, want := range map[string]string{"test-branch": "master", "resolved_base": runs.PresetBaseSHA,
			"base-signature": runs.PresetBaseBench, "num-games": "60000", "threads": "8", "new-options": "Hash=512"} {
			if got, _ := formInputValue(page, field); got != want {
				t.Errorf("%s = %q, want %q", field, got, want)
			}
		}
		if !formChecked(page, "stop_rule", "numgames") {
			t.Errorf("a progression test plays a fixed number of games")
		}
	})

	t.Run("unknown preset", func(t *testing.T) {
		if w := alice.Get("/tests/run?preset=bullet"); w.Code != http.StatusBadRequest {
			t.Fatalf("status %d", w.Code)
		}
	})

	t.Run("reschedule prefills from the run", func(t *testing.T) {
		r := env.runOf("bob")
		page := body(alice.Get("/tests/run?id=" + r.ID.Hex()))
		for field, want := range map[string]string{"test-branch": "patch-bob", "resolved_new": formShaNew,
			"resolved_base": formShaBase, "tc": "10+0.1", "sprt_elo0": "0", "sprt_elo1": "2",
			"tests-repo": "https://github.com/bob/Stockfish", "run-info": "a test of bob",
			"rescheduled_from": r.ID.Hex(), "test-signature": "2061234"} {
			if got, ok := formInputValue(page, field); !ok || got != want {
				t.Errorf("%s = %q, want %q", field, got, want)
			}
		}
		if !formSelected(page, "stc") {
			t.Errorf("a rescheduled SPRT with <0, 2> on STC does not offer the standard STC bounds")
		}
		// A preset keeps the run's engines.
		page = body(alice.Get("/tests/run?preset=pt&id=" + r.ID.Hex()))
		if got, _ := formInputValue(page, "test-branch"); got != "patch-bob" {
			t.Errorf("the PT preset replaced the rescheduled run's branch: %q", got)
		}
		if got, _ := formInputValue(page, "rescheduled_from"); got != r.ID.Hex() {
			t.Errorf("rescheduled_from lost with a preset")
		}
	})

	t.Run("reschedule an SPSA run", func(t *testing.T) {
		r, err := env.Sched.CreateRun(context.Background(), protocol.RunRequest{
			BaseTag: "master", NewTag: "tune", ResolvedBase: formShaBase, ResolvedNew: formShaNew,
			TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16", NewSignature: "2061234",
			TestsRepo: "https://github.com/alice/Stockfish", Info: "tune",
			SPSA: &protocol.SPSARequest{RawParams: "Tempo,20,0,50,2,0.002", NumGames: 20000},
		}, "alice")
		if err != nil {
			t.Fatal(err)
		}
		page := body(alice.Get("/tests/run?id=" + r.ID.Hex()))
		for field, want := range map[string]string{"num-games": "20000", "spsa_A": "0.1",
			"spsa_raw_params": "Tempo,20,0,50,2,0.002"} {
			if got, _ := formInputValue(page, field); got != want {
				t.Errorf("%s = %q, want %q", field, got, want)
			}
		}
		if !formChecked(page, "stop_rule", "spsa") {
			t.Errorf("not SPSA")
		}
	})

	t.Run("reschedule: bad and unknown ids", func(t *testing.T) {
		if w := alice.Get("/tests/run?id=nope"); w.Code != http.StatusBadRequest {
			t.Errorf("bad id: %d", w.Code)
		}
		if w := alice.Get("/tests/run?id=" + rundb.NewObjectID().Hex()); w.Code != http.StatusNotFound {
			t.Errorf("unknown run: %d", w.Code)
		}
	})
}

func TestUIRunFormSubmit(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")

	t.Run("SPRT with preset bounds", func(t *testing.T) {
		// Without JavaScript, the typed Elo values are the previous preset's: the bounds menu wins.
		w := alice.Post("/tests/run", formWith(runFormValues(), "bounds", "nonreg-stc", "sprt_elo0", "0", "sprt_elo1", "2"))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d\n%s", w.Code, body(w))
		}
		r := env.submittedRun(w)
		a := r.Args
		if a.Username != "alice" || r.Approved || a.SPRT == nil || a.SPRT.Elo0 != -1.75 || a.SPRT.Elo1 != 0.25 ||
			a.NumGames != scheduler.SPRTMaxGames || a.TC != "10+0.1" || a.NewTC != "10+0.1" || a.Threads != 1 ||
			a.Throughput != 100 || !a.Adjudication || a.AutoPurge || a.ResolvedNew != formShaNew ||
			a.ResolvedBase != formShaBase || a.NewSignature != "2061234" || a.BaseSignature != "2050811" ||
			a.Info != "try a patch" || a.TestsRepo != "https://github.com/alice/Stockfish" || a.ArchFilter != "" || a.Compiler != "" {
			t.Fatalf("stored %+v (sprt %+v)", a, a.SPRT)
		}
		if page := alice.flashPage(); !strings.Contains(page, "Test submitted; an approver must approve it.") {
			t.Errorf("no flash after submitting")
		}
	})

	t.Run("SPRT with custom bounds at LTC", func(t *testing.T) {
		w := alice.Post("/tests/run", formWith(runFormValues(), "bounds", "custom", "sprt_elo0", "0.5", "sprt_elo1", "3",
			"tc", "60+0.6", "new_tc", "60+0.6", "new-options", "Hash=64", "base-options", "Hash=64"))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d\n%s", w.Code, body(w))
		}
		a := env.submittedRun(w).Args
		if a.SPRT.Elo0 != 0.5 || a.SPRT.Elo1 != 3 || a.TC != "60+0.6" || a.Info != "LTC: try a patch" || a.NewOptions != "Hash=64" {
			t.Fatalf("stored %+v (sprt %+v)", a, a.SPRT)
		}
	})

	t.Run("fixed games with every option", func(t *testing.T) {
		w := alice.Post("/tests/run", formWith(runFormValues(), "stop_rule", "numgames", "num-games", "20000",
			"odds", "on", "new_tc", "20+0.2", "checkbox-arch-filter", "on", "arch-filter", "avx2",
			"checkbox-compiler", "on", "compiler", "g++", "adjudication", "on", "auto-purge", "on",
			"priority", "1", "throughput", "50", "threads", "2", "book", "8moves_v3.pgn", "book-depth", "6",
			"new-options", "Hash=32  Threads=2", "msg_new", "the patch"))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d\n%s", w.Code, body(w))
		}
		a := env.submittedRun(w).Args
		if a.SPRT != nil || a.SPSA != nil || a.NumGames != 20000 || a.NewTC != "20+0.2" || a.ArchFilter != "avx2" ||
			a.Compiler != "g++" || a.Adjudication || !a.AutoPurge || a.Priority != 1 || a.Throughput != 50 ||
			a.Threads != 2 || a.Book != "8moves_v3.pgn" || a.BookDepth != "6" || a.NewOptions != "Hash=32 Threads=2" ||
			a.MsgNew != "the patch" {
			t.Fatalf("stored %+v", a)
		}
	})

	t.Run("unticked boxes drop their fields", func(t *testing.T) {
		w := alice.Post("/tests/run", formWith(runFormValues(), "new_tc", "20+0.2", "arch-filter", "avx2", "compiler", "g++"))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d\n%s", w.Code, body(w))
		}
		a := env.submittedRun(w).Args
		if a.NewTC != a.TC || a.ArchFilter != "" || a.Compiler != "" {
			t.Fatalf("new_tc %q arch %q compiler %q", a.NewTC, a.ArchFilter, a.Compiler)
		}
	})

	t.Run("SPSA", func(t *testing.T) {
		w := alice.Post("/tests/run", formWith(runFormValues(), "stop_rule", "spsa", "num-games", "20000",
			"spsa_A", "0.2", "spsa_raw_params", "Tempo,20,0,50,2,0.002\nOther,-5,-10,10,0.5,0.01", "base-signature", ""))
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d\n%s", w.Code, body(w))
		}
		a := env.submittedRun(w).Args
		if a.SPSA == nil || a.NumGames != 20000 || a.SPSA.A != 2000 || a.SPSA.Alpha != 0.602 || a.SPSA.Gamma != 0.101 ||
			len(a.SPSA.Params) != 2 || a.SPSA.Params[0].Name != "Tempo" || a.BaseSignature != "2061234" {
			t.Fatalf("stored %+v (spsa %+v)", a, a.SPSA)
		}
	})

	tests := []struct {
		name   string
		form   url.Values
		fields []string // marked wrong
		kept   map[string]string
	}{
		{"bad time control", formWith(runFormValues(), "tc", "10+"), []string{"tc"}, map[string]string{"tc": "10+"}},
		{"elo0 not below elo1", formWith(runFormValues(), "bounds", "custom", "sprt_elo0", "2", "sprt_elo1", "1"),
			[]string{"sprt_elo1"}, map[string]string{"sprt_elo0": "2", "sprt_elo1": "1"}},
		{"elo0 not a number", formWith(runFormValues(), "bounds", "custom", "sprt_elo0", "zero"),
			[]string{"sprt_elo0"}, map[string]string{"sprt_elo0": "zero"}},
		{"games not a multiple of 1000", formWith(runFormValues(), "stop_rule", "numgames", "num-games", "1500"),
			[]string{"num-games"}, map[string]string{"num-games": "1500"}},
		{"too few games", formWith(runFormValues(), "stop_rule", "numgames", "num-games", "0"), []string{"num-games"}, nil},
		{"bad options", formWith(runFormValues(), "new-options", "Hash=16 Threads"), []string{"new-options"},
			map[string]string{"new-options": "Hash=16 Threads"}},
		{"non-ASCII options", formWith(runFormValues(), "base-options", "Hash=16 Café=1"), []string{"base-options"}, nil},
		{"threads not a number", formWith(runFormValues(), "threads", "two"), []string{"threads"}, map[string]string{"threads": "two"}},
		{"branch name for a sha", formWith(runFormValues(), "resolved_new", "my-branch"), []string{"resolved_new"},
			map[string]string{"resolved_new": "my-branch"}},
		{"missing info", formWith(runFormValues(), "run-info", "  "), []string{"run-info"}, nil},
		{"not a GitHub repository", formWith(runFormValues(), "tests-repo", "ftp://example.org/sf"), []string{"tests-repo"}, nil},
		{"bad signature", formWith(runFormValues(), "test-signature", "12ab"), []string{"test-signature"}, nil},
		{"arch filter matching nothing", formWith(runFormValues(), "checkbox-arch-filter", "on", "arch-filter", "^sparc$"),
			[]string{"arch-filter"}, map[string]string{"arch-filter": "^sparc$"}},
		{"SPSA parameters", formWith(runFormValues(), "stop_rule", "spsa", "num-games", "20000", "spsa_raw_params", "Tempo,20,0"),
			[]string{"spsa_raw_params"}, map[string]string{"spsa_raw_params": "Tempo,20,0"}},
		{"no stop rule", formWith(runFormValues(), "stop_rule", "forever"), []string{"stop_rule"}, nil},
		{"network not uploaded", formWith(runFormValues(), "new-nets", "nn-0123456789ab.nnue"), []string{"new-nets"},
			map[string]string{"new-nets": "nn-0123456789ab.nnue"}},
		{"every wrong field at once", formWith(runFormValues(), "tc", "fast", "base-options", "Hash", "resolved_base", "abc",
			"threads", "0", "throughput", "-5", "book", "../book.epd"),
			[]string{"tc", "base-options", "resolved_base", "threads", "throughput", "book"},
			map[string]string{"tc": "fast", "base-options": "Hash", "resolved_base": "abc", "test-branch": "patch", "run-info": "try a patch"}},
	}
	for _, tc := range tests {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			before := env.runCount()
			w := alice.Post("/tests/run", tc.form)
			page := body(w)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400\n%s", w.Code, page)
			}
			for _, f := range tc.fields {
				if !formMarked(page, f) {
					t.Errorf("%s not marked wrong\n%s", f, page)
				}
			}
			for _, f := range tc.fields {
				if !regexp.MustCompile(`class="[^"]*\binvalid"[^>]*>\s*(<label for="` + regexp.QuoteMeta(f) + `"|<legend>)`).MatchString(page) {
					t.Errorf("%s: its field has no invalid class", f)
				}
			}
			if n := strings.Count(page, `class="field-error"`); n < len(tc.fields) {
				t.Errorf("%d field messages, want %d", n, len(tc.fields))
			}
			for f, want := range tc.kept {
				if got, _ := formInputValue(page, f); got != want {
					t.Errorf("%s shown as %q, want what was typed, %q", f, got, want)
				}
			}
			if after := env.runCount(); after != before {
				t.Errorf("%d runs stored, want %d", after, before)
			}
		})
	}

	t.Run("without the CSRF token nothing is stored", func(t *testing.T) {
		before := env.runCount()
		if w := alice.PostRaw("/tests/run", runFormValues()); w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if after := env.runCount(); after != before {
			t.Errorf("%d runs stored, want %d", after, before)
		}
	})

	t.Run("anonymous cannot submit", func(t *testing.T) {
		before := env.runCount()
		w := env.anon().Post("/tests/run", runFormValues())
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
			t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
		}
		if after := env.runCount(); after != before {
			t.Errorf("%d runs stored, want %d", after, before)
		}
	})

	t.Run("a blocked user cannot log in", func(t *testing.T) {
		eve := env.anon()
		w := eve.Post("/login", url.Values{"username": {"eve"}, "password": {uiPassword}})
		if w.Code == http.StatusSeeOther || w.Code == http.StatusFound {
			t.Fatalf("eve logged in: %d", w.Code)
		}
		before := env.runCount()
		if w := eve.Post("/tests/run", runFormValues()); w.Code != http.StatusSeeOther ||
			!strings.HasPrefix(w.Header().Get("Location"), "/login") {
			t.Fatalf("eve's submission: %d to %q", w.Code, w.Header().Get("Location"))
		}
		if after := env.runCount(); after != before {
			t.Errorf("%d runs stored, want %d", after, before)
		}
	})
}

func TestUIRunFormSecondary(t *testing.T) {
	env := newUIEnv(t)
	alice := env.as("alice")
	r := env.runOf("alice")
	sec := alice.onSecondary(t)
	before := env.runCount()
	if w := sec.Post("/tests/run", runFormValues()); w.Code != http.StatusServiceUnavailable {
		t.Errorf("submit on a secondary: %d", w.Code)
	}
	if after := env.runCount(); after != before {
		t.Errorf("%d runs stored, want %d", after, before)
	}
	if w := sec.Post("/tests/stop", url.Values{"run-id": {r.ID.Hex()}}); w.Code != http.StatusServiceUnavailable {
		t.Errorf("stop on a secondary: %d", w.Code)
	}
	if env.runNow(r.ID).Finished {
		t.Errorf("stopped on a secondary")
	}
}

func TestUIRunActionStop(t *testing.T) {
	env := newUIEnv(t)
	alice, bob := env.as("alice"), env.as("bob")

	t.Run("another user may not", func(t *testing.T) {
		r := env.runOf("bob")
		if w := alice.Post("/tests/stop", url.Values{"run-id": {r.ID.Hex()}}); w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if env.runNow(r.ID).Finished {
			t.Errorf("stopped by another user")
		}
	})
	t.Run("the owner may", func(t *testing.T) {
		r := env.runOf("alice")
		w := alice.Post("/tests/stop", url.Values{"run-id": {r.ID.Hex()}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests/view/"+r.ID.Hex() {
			t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
		}
		if !env.runNow(r.ID).Finished {
			t.Errorf("not stopped")
		}
		if !strings.Contains(alice.flashPage(), "Run stopped.") {
			t.Errorf("no flash")
		}
	})
	t.Run("an approver may", func(t *testing.T) {
		r := env.runOf("alice")
		if w := bob.Post("/tests/stop", url.Values{"run-id": {r.ID.Hex()}}); w.Code != http.StatusSeeOther {
			t.Fatalf("status %d", w.Code)
		}
		if !env.runNow(r.ID).Finished {
			t.Errorf("not stopped")
		}
	})
	t.Run("without the CSRF token", func(t *testing.T) {
		r := env.runOf("alice")
		if w := alice.PostRaw("/tests/stop", url.Values{"run-id": {r.ID.Hex()}}); w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if env.runNow(r.ID).Finished {
			t.Errorf("stopped without a token")
		}
	})
	t.Run("anonymous", func(t *testing.T) {
		r := env.runOf("alice")
		w := env.anon().Post("/tests/stop", url.Values{"run-id": {r.ID.Hex()}})
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
			t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
		}
		if env.runNow(r.ID).Finished {
			t.Errorf("stopped anonymously")
		}
	})
	t.Run("bad and unknown run ids", func(t *testing.T) {
		for _, c := range []struct {
			id     string
			status int
		}{{"", http.StatusBadRequest}, {"xyz", http.StatusBadRequest}, {rundb.NewObjectID().Hex(), http.StatusNotFound}} {
			if w := bob.Post("/tests/stop", url.Values{"run-id": {c.id}}); w.Code != c.status {
				t.Errorf("run-id %q: %d, want %d", c.id, w.Code, c.status)
			}
		}
	})
	t.Run("a user blocked after logging in", func(t *testing.T) {
		env2 := newUIEnv(t)
		alice2 := env2.as("alice")
		r := env2.runOf("alice")
		token := alice2.CSRF() // the page was open before the block
		if err := env2.DB.Users.SetBlocked(context.Background(), "alice", true); err != nil {
			t.Fatal(err)
		}
		w := alice2.PostRaw("/tests/stop", url.Values{"run-id": {r.ID.Hex()}, "csrf_token": {token}})
		if w.Code == http.StatusSeeOther && w.Header().Get("Location") == "/tests/view/"+r.ID.Hex() {
			t.Fatalf("a blocked user stopped a run")
		}
		if env2.runNow(r.ID).Finished {
			t.Errorf("stopped by a blocked user")
		}
		if w := alice2.PostRaw("/tests/run", formWith(runFormValues(), "csrf_token", token)); w.Code == http.StatusSeeOther && strings.HasPrefix(w.Header().Get("Location"), "/tests/view/") {
			t.Errorf("a blocked user submitted a run")
		}
	})
}

func TestUIRunActionApprove(t *testing.T) {
	env := newUIEnv(t)
	alice, bob, carol := env.as("alice"), env.as("bob"), env.as("carol")
	r := env.runOf("alice")
	id := func() url.Values { return url.Values{"run-id": {r.ID.Hex()}} }

	if w := alice.Post("/tests/approve", id()); w.Code != http.StatusForbidden {
		t.Errorf("a user approving: %d", w.Code)
	}
	if w := bob.PostRaw("/tests/approve", id()); w.Code != http.StatusForbidden {
		t.Errorf("without the CSRF token: %d", w.Code)
	}
	if env.runNow(r.ID).Approved {
		t.Fatalf("approved by a user or without a token")
	}

	own := env.runOf("bob")
	if w := bob.Post("/tests/approve", url.Values{"run-id": {own.ID.Hex()}}); w.Code != http.StatusForbidden {
		t.Errorf("self approval: %d", w.Code)
	}
	if env.runNow(own.ID).Approved {
		t.Errorf("an approver approved their own run")
	}

	if w := bob.Post("/tests/approve", id()); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests/view/"+r.ID.Hex() {
		t.Fatalf("approve: %d to %q\n%s", w.Code, w.Header().Get("Location"), body(w))
	}
	if got := env.runNow(r.ID); !got.Approved || got.Approver != "bob" {
		t.Fatalf("approved %v by %q", got.Approved, got.Approver)
	}
	if !strings.Contains(bob.flashPage(), "Run approved.") {
		t.Errorf("no flash")
	}
	if w := carol.Post("/tests/approve", id()); w.Code != http.StatusSeeOther {
		t.Errorf("second approval: %d", w.Code)
	}
	if got := env.runNow(r.ID); got.Approver != "bob" {
		t.Errorf("approved twice: approver %q", got.Approver)
	}
	if !strings.Contains(carol.flashPage(), "already approved") {
		t.Errorf("the second approver is not told")
	}
	if w := carol.Post("/tests/approve", url.Values{"run-id": {rundb.NewObjectID().Hex()}}); w.Code != http.StatusNotFound {
		t.Errorf("unknown run: %d", w.Code)
	}
}

func TestUIRunActionPurgeDelete(t *testing.T) {
	env := newUIEnv(t)
	alice, bob, carol := env.as("alice"), env.as("bob"), env.as("carol")
	ctx := context.Background()

	t.Run("purge", func(t *testing.T) {
		r := env.runOf("bob")
		id := func() url.Values { return url.Values{"run-id": {r.ID.Hex()}} }
		if w := alice.Post("/tests/purge", id()); w.Code != http.StatusForbidden {
			t.Errorf("another user: %d", w.Code)
		}
		if w := bob.PostRaw("/tests/purge", id()); w.Code != http.StatusForbidden {
			t.Errorf("without the CSRF token: %d", w.Code)
		}
		// An unfinished run is not purged, and the owner is told why.
		if w := bob.Post("/tests/purge", id()); w.Code != http.StatusSeeOther {
			t.Fatalf("owner: %d", w.Code)
		}
		if page := bob.flashPage(); !strings.Contains(page, "Nothing purged: Can only purge completed run.") {
			t.Errorf("the owner is not told why nothing was purged")
		}
		if err := env.Sched.StopRunByUser(ctx, r.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		if w := carol.Post("/tests/purge", id()); w.Code != http.StatusSeeOther {
			t.Fatalf("approver: %d", w.Code)
		}
		if page := carol.flashPage(); !strings.Contains(page, "Nothing purged: No bad workers.") {
			t.Errorf("approver's purge: no message")
		}
		acts, err := env.DB.Actions.Find(ctx, rundb.ActionFilter{RunID: r.ID.Hex(), Action: "purge_run"}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(acts) != 2 {
			t.Errorf("%d purge_run actions, want 2 (owner and approver; not the refused user)", len(acts))
		}
	})

	t.Run("delete", func(t *testing.T) {
		r := env.runOf("alice")
		id := func() url.Values { return url.Values{"run-id": {r.ID.Hex()}} }
		if w := bob.PostRaw("/tests/delete", id()); w.Code != http.StatusForbidden {
			t.Errorf("without the CSRF token: %d", w.Code)
		}
		if env.runNow(r.ID).Deleted {
			t.Fatalf("deleted without a token")
		}
		other := env.runOf("bob")
		if w := alice.Post("/tests/delete", url.Values{"run-id": {other.ID.Hex()}}); w.Code != http.StatusForbidden {
			t.Errorf("another user: %d", w.Code)
		}
		if env.runNow(other.ID).Deleted {
			t.Errorf("deleted by another user")
		}
		if w := alice.Post("/tests/delete", id()); w.Code != http.StatusSeeOther {
			t.Fatalf("owner: %d", w.Code)
		}
		if got := env.runNow(r.ID); !got.Deleted || !got.Finished {
			t.Errorf("deleted %v finished %v", got.Deleted, got.Finished)
		}
		if w := bob.Post("/tests/delete", url.Values{"run-id": {other.ID.Hex()}}); w.Code != http.StatusSeeOther {
			t.Fatalf("approver on own run: %d", w.Code)
		}
		third := env.runOf("alice")
		if w := carol.Post("/tests/delete", url.Values{"run-id": {third.ID.Hex()}}); w.Code != http.StatusSeeOther {
			t.Fatalf("approver: %d", w.Code)
		}
		if !env.runNow(third.ID).Deleted {
			t.Errorf("not deleted by an approver")
		}
	})
}

func TestUIRunActionModify(t *testing.T) {
	env := newUIEnv(t)
	alice, bob := env.as("alice"), env.as("bob")
	ctx := context.Background()
	modify := func(id rundb.ObjectID, kv ...string) url.Values {
		return formWith(url.Values{"run-id": {id.Hex()}, "num-games": {"800000"}, "priority": {"0"}, "throughput": {"100"}}, kv...)
	}

	t.Run("the owner", func(t *testing.T) {
		r := env.runOf("alice")
		w := alice.Post("/tests/modify", modify(r.ID, "num-games", "400000", "priority", "-1", "throughput", "50",
			"auto-purge", "true", "info", "  better words  "))
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests/view/"+r.ID.Hex() {
			t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
		}
		a := env.runNow(r.ID).Args
		if a.NumGames != 400000 || a.Priority != -1 || a.Throughput != 50 || !a.AutoPurge || a.Info != "better words" {
			t.Fatalf("stored %+v", a)
		}
		if !strings.Contains(alice.flashPage(), "Run modified") {
			t.Errorf("no flash")
		}
	})

	t.Run("an approver, who cannot change the info", func(t *testing.T) {
		r := env.runOf("alice")
		if w := bob.Post("/tests/modify", modify(r.ID, "priority", "2", "info", "bob's words")); w.Code != http.StatusSeeOther {
			t.Fatalf("status %d", w.Code)
		}
		a := env.runNow(r.ID).Args
		if a.Priority != 2 || a.Info != "a test of alice" || a.AutoPurge {
			t.Fatalf("stored %+v", a)
		}
	})

	t.Run("a raise by the owner withdraws the approval", func(t *testing.T) {
		r := env.runOf("alice")
		if err := env.Sched.ApproveRun(ctx, r.ID, "bob"); err != nil {
			t.Fatal(err)
		}
		if w := alice.Post("/tests/modify", modify(r.ID, "throughput", "200")); w.Code != http.StatusSeeOther {
			t.Fatalf("status %d", w.Code)
		}
		if got := env.runNow(r.ID); got.Approved || got.Args.Throughput != 200 {
			t.Errorf("approved %v throughput %v", got.Approved, got.Args.Throughput)
		}
		if !strings.Contains(alice.flashPage(), "must be approved again") {
			t.Errorf("the owner is not told")
		}
	})

	t.Run("another user may not", func(t *testing.T) {
		r := env.runOf("bob")
		if w := alice.Post("/tests/modify", modify(r.ID, "priority", "5")); w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if env.runNow(r.ID).Args.Priority != 0 {
			t.Errorf("modified by another user")
		}
	})

	t.Run("without the CSRF token", func(t *testing.T) {
		r := env.runOf("alice")
		if w := alice.PostRaw("/tests/modify", modify(r.ID, "priority", "5")); w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if env.runNow(r.ID).Args.Priority != 0 {
			t.Errorf("modified without a token")
		}
	})

	for _, tc := range []struct {
		name    string
		kv      []string
		message string
	}{
		{"games not a multiple of 1000", []string{"num-games", "1500", "priority", "3"}, "Number of games: 1500: must be a multiple of 1000"},
		{"negative throughput", []string{"throughput", "-1", "priority", "3"}, "Throughput: -1: must be &gt;= 0"},
		{"priority not a number", []string{"priority", "high"}, "Priority: &#34;high&#34; is not a whole number"},
		{"missing games", []string{"num-games", "", "priority", "3"}, "Number of games: missing"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			r := env.runOf("alice")
			before := env.runNow(r.ID).Args
			w := alice.Post("/tests/modify", modify(r.ID, tc.kv...))
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/tests/view/"+r.ID.Hex() {
				t.Fatalf("%d to %q", w.Code, w.Header().Get("Location"))
			}
			if page := alice.flashPage(); !strings.Contains(page, "Not modified: "+tc.message) {
				t.Errorf("flash does not say %q:\n%s", tc.message, page)
			}
			after := env.runNow(r.ID).Args
			if after.NumGames != before.NumGames || after.Priority != before.Priority || after.Throughput != before.Throughput {
				t.Errorf("changed: %+v", after)
			}
		})
	}
}

// The form's script and style must be served: the page links them.
func TestUIRunFormAssets(t *testing.T) {
	env := newUIEnv(t)
	for _, path := range []string{"/static/runform.js", "/static/runform.css"} {
		w := env.anon().Get(path)
		if w.Code != http.StatusOK || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d", path, w.Code)
		}
	}
}
