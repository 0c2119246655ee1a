package networks_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

// nnNameOf returns the proper name of a network with these contents.
func nnNameOf(content []byte) string {
	sum := sha256.Sum256(content)
	return "nn-" + hex.EncodeToString(sum[:])[:12] + ".nnue"
}

// nnToken returns the CSRF token of a logged-in browser, read from the upload form.
func (b *browser) nnToken() string {
	b.Env.T.Helper()
	w := b.Get("/upload")
	m := uitest.CSRFInput.FindStringSubmatch(body(w))
	if m == nil {
		b.Env.T.Fatalf("no csrf_token on /upload (%d):\n%s", w.Code, body(w))
	}
	return m[1]
}

// nnUploadOpts say how an upload request is built.
type nnUploadOpts struct {
	token       string // "" sends none
	tokenHeader bool   // the token in X-CSRF-Token instead of the form
	noCC0       bool   // leave the licence box unticked
	noFile      bool   // no file part at all
}

// nnUpload posts a network file as the upload form does: token, licence box, then the file.
func (b *browser) nnUpload(filename string, content []byte, o nnUploadOpts) *httptest.ResponseRecorder {
	b.Env.T.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if o.token != "" && !o.tokenHeader {
		_ = mw.WriteField("csrf_token", o.token)
	}
	if !o.noCC0 {
		_ = mw.WriteField("cc0", "1")
	}
	if !o.noFile {
		fw, err := mw.CreateFormFile("network", filename)
		if err != nil {
			b.Env.T.Fatal(err)
		}
		_, _ = fw.Write(content)
	}
	_ = mw.Close()
	req := httptest.NewRequest(http.MethodPost, "/upload", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if o.tokenHeader {
		req.Header.Set("X-CSRF-Token", o.token)
	}
	return b.Do(req)
}

// nnFiles lists what the networks directory holds (temporary files included).
func (e *uiEnv) nnFiles() []string {
	e.T.Helper()
	entries, err := os.ReadDir(filepath.Join(e.Deps.DataDir, "nn"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.T.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	return names
}

// nnUploadActions returns the upload_nn actions.
func (e *uiEnv) nnUploadActions() []*rundb.Action {
	e.T.Helper()
	acts, err := e.DB.Actions.Find(context.Background(), rundb.ActionFilter{Action: "upload_nn"}, 0)
	if err != nil {
		e.T.Fatal(err)
	}
	return acts
}

// nnGunzip returns the contents of a gzip file.
func nnGunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// nnContent is a small stand-in for a network file.
func nnContent(seed string) []byte {
	return bytes.Repeat([]byte("NNUE "+seed+" "), 100)
}

func TestUINNUploadNeedsLogin(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	w := b.Get("/upload")
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login?next=%2Fupload") {
		t.Errorf("GET /upload anonymously = %d to %q, want 303 to the login page", w.Code, w.Header().Get("Location"))
	}
	content := nnContent("anonymous")
	w = b.nnUpload(nnNameOf(content), content, nnUploadOpts{token: b.CSRF()})
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
		t.Errorf("POST /upload anonymously = %d to %q, want 303 to the login page", w.Code, w.Header().Get("Location"))
	}
	if files := env.nnFiles(); len(files) != 0 {
		t.Errorf("an anonymous upload left %v", files)
	}
	if acts := env.nnUploadActions(); len(acts) != 0 {
		t.Errorf("an anonymous upload recorded %d actions", len(acts))
	}
}

func TestUINNUploadForm(t *testing.T) {
	env := newUIEnv(t)
	w := env.as("alice").Get("/upload")
	page := body(w)
	for _, want := range []string{`enctype="multipart/form-data"`, `name="network"`, `name="cc0"`, `name="csrf_token"`, "smaller than 200 MB", "SHA-256"} {
		if !strings.Contains(page, want) {
			t.Errorf("the upload form lacks %q", want)
		}
	}
	if w.Code != http.StatusOK {
		t.Errorf("GET /upload = %d, want 200", w.Code)
	}
	if w := env.anon().Get("/static/nns.css"); w.Code != http.StatusOK || !strings.Contains(body(w), ".sprt-charts") {
		t.Errorf("GET /static/nns.css = %d", w.Code)
	}
}

func TestUINNUploadStoresNetwork(t *testing.T) {
	for _, mode := range []struct {
		name   string
		header bool
	}{{"token in the form", false}, {"token in the header, body streamed", true}} {
		t.Run(mode.name, func(t *testing.T) {
			env := newUIEnv(t)
			b := env.as("alice")
			content := nnContent(mode.name)
			name := nnNameOf(content)
			w := b.nnUpload(name, content, nnUploadOpts{token: b.nnToken(), tokenHeader: mode.header})
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/nns" {
				t.Fatalf("upload = %d to %q, want 303 to /nns:\n%s", w.Code, w.Header().Get("Location"), body(w))
			}
			if files := env.nnFiles(); !reflect.DeepEqual(files, []string{name + ".gz"}) {
				t.Errorf("the networks directory holds %v, want only %s.gz", files, name)
			}
			stored := nnGunzip(t, filepath.Join(env.Deps.DataDir, "nn", name+".gz"))
			if !bytes.Equal(stored, content) || nnNameOf(stored) != name {
				t.Errorf("the stored file gunzips to %d bytes named %s, want the %d uploaded", len(stored), nnNameOf(stored), len(content))
			}
			nn, err := env.DB.NNs.Get(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if nn.User != "alice" || nn.Downloads != 0 || nn.IsMaster {
				t.Errorf("nns document = %+v, want alice's with no downloads", nn)
			}
			acts := env.nnUploadActions()
			if len(acts) != 1 || acts[0].Username != "alice" || acts[0].NN != name {
				t.Errorf("upload_nn actions = %+v, want one by alice for %s", acts, name)
			}
			page := body(b.Get("/nns"))
			if !strings.Contains(page, "Network "+name+" uploaded.") || !strings.Contains(page, `href="/api/nn/`+name+`"`) {
				t.Errorf("/nns does not confirm and list the upload:\n%s", page)
			}
		})
	}
}

func TestUINNUploadRefusals(t *testing.T) {
	good := nnContent("good")
	goodName := nnNameOf(good)
	other := nnContent("other")
	cases := []struct {
		name     string
		filename string
		content  []byte
		opts     nnUploadOpts
		setup    func(t *testing.T, env *uiEnv)
		limit    int64 // lowers the server's MaxNetworkSize when set
		message  string
	}{
		{name: "a name that is not a network's", filename: "network.nnue", content: good,
			message: "The file name must be nn-"},
		{name: "upper-case hex digits", filename: strings.ToUpper(goodName[:15]) + ".nnue", content: good,
			message: "The file name must be nn-"},
		{name: "a name whose hash is not the file's", filename: nnNameOf(other), content: good,
			message: "Wrong SHA-256: the file&#39;s hash begins with " + goodName[3:15]},
		{name: "a network already known", filename: goodName, content: good,
			setup: func(t *testing.T, env *uiEnv) {
				if err := env.DB.NNs.Insert(context.Background(), &rundb.NN{Name: goodName, User: "bob", Downloads: 7}); err != nil {
					t.Fatal(err)
				}
			},
			message: "The network " + goodName + " already exists."},
		{name: "a network already on disk", filename: goodName, content: good,
			setup: func(t *testing.T, env *uiEnv) {
				dir := filepath.Join(env.Deps.DataDir, "nn")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, goodName+".gz"), []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			message: "The network " + goodName + " already exists."},
		{name: "a file at the size limit", filename: goodName, content: good, limit: int64(len(good)),
			message: fmt.Sprintf("The network must be smaller than %d bytes.", len(good))},
		{name: "a file over the size limit when streamed", filename: goodName, content: good, limit: int64(len(good)) - 100,
			opts:    nnUploadOpts{tokenHeader: true},
			message: fmt.Sprintf("The network must be smaller than %d bytes.", len(good)-100)},
		{name: "an empty file", filename: nnNameOf(nil), content: nil, message: "The file is empty."},
		{name: "no file", opts: nnUploadOpts{noFile: true}, message: "Choose a network file to upload."},
		{name: "no file when streamed", opts: nnUploadOpts{noFile: true, tokenHeader: true}, message: "Choose a network file to upload."},
		{name: "the licence box unticked", filename: goodName, content: good, opts: nnUploadOpts{noCC0: true},
			message: "Confirm that the network may be shared under the CC0 licence."},
		{name: "the licence box unticked when streamed", filename: goodName, content: good, opts: nnUploadOpts{noCC0: true, tokenHeader: true},
			message: "Confirm that the network may be shared under the CC0 licence."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := newUIEnvWith(t, func(d *server.Deps) { d.MaxNetworkSize = c.limit })
			if c.setup != nil {
				c.setup(t, env)
			}
			before := env.nnFiles()
			b := env.as("alice")
			opts := c.opts
			opts.token = b.nnToken()
			w := b.nnUpload(c.filename, c.content, opts)
			page := body(w)
			if w.Code != http.StatusBadRequest || !strings.Contains(page, c.message) {
				t.Fatalf("upload = %d, want 400 with %q:\n%s", w.Code, c.message, page)
			}
			if !strings.Contains(page, `enctype="multipart/form-data"`) || !strings.Contains(page, `class="field-error"`) {
				t.Errorf("the refusal does not show the form with the field's error")
			}
			if after := env.nnFiles(); !slices.Equal(before, after) {
				t.Errorf("the networks directory went from %v to %v", before, after)
			}
			if acts := env.nnUploadActions(); len(acts) != 0 {
				t.Errorf("a refused upload recorded %d actions", len(acts))
			}
			sum, err := env.DB.NNs.Summary(context.Background(), rundb.NNFilter{})
			if err != nil {
				t.Fatal(err)
			}
			wantNets := 0
			if c.name == "a network already known" {
				wantNets = 1
				if nn, err := env.DB.NNs.Get(context.Background(), goodName); err != nil || nn.User != "bob" || nn.Downloads != 7 {
					t.Errorf("the known network became %+v, %v", nn, err)
				}
			}
			if sum.Nets != wantNets {
				t.Errorf("%d networks recorded, want %d", sum.Nets, wantNets)
			}
		})
	}
}

func TestUINNUploadRefusesWithoutCSRF(t *testing.T) {
	env := newUIEnv(t)
	b := env.as("alice")
	content := nnContent("csrf")
	for _, c := range []struct {
		name string
		opts nnUploadOpts
	}{
		{"no token", nnUploadOpts{}},
		{"a wrong token in the form", nnUploadOpts{token: "forged"}},
		{"a wrong token in the header", nnUploadOpts{token: "forged", tokenHeader: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := b.nnUpload(nnNameOf(content), content, c.opts)
			if w.Code != http.StatusForbidden {
				t.Errorf("upload = %d, want 403:\n%s", w.Code, body(w))
			}
		})
	}
	if files := env.nnFiles(); len(files) != 0 {
		t.Errorf("uploads without the token left %v", files)
	}
	if _, err := env.DB.NNs.Get(context.Background(), nnNameOf(content)); err == nil {
		t.Error("an upload without the token was recorded")
	}
	if acts := env.nnUploadActions(); len(acts) != 0 {
		t.Errorf("uploads without the token recorded %d actions", len(acts))
	}
}

// The same network uploaded twice: the second is refused and the first stays as it was.
func TestUINNUploadTwice(t *testing.T) {
	env := newUIEnv(t)
	content := nnContent("twice")
	name := nnNameOf(content)
	alice, bob := env.as("alice"), env.as("bob")
	if w := alice.nnUpload(name, content, nnUploadOpts{token: alice.nnToken()}); w.Code != http.StatusSeeOther {
		t.Fatalf("first upload = %d:\n%s", w.Code, body(w))
	}
	w := bob.nnUpload(name, content, nnUploadOpts{token: bob.nnToken()})
	if w.Code != http.StatusBadRequest || !strings.Contains(body(w), "already exists") {
		t.Fatalf("second upload = %d, want 400 already exists:\n%s", w.Code, body(w))
	}
	if nn, err := env.DB.NNs.Get(context.Background(), name); err != nil || nn.User != "alice" {
		t.Errorf("the network is now %+v, %v; want alice's", nn, err)
	}
	if files := env.nnFiles(); len(files) != 1 {
		t.Errorf("the networks directory holds %v, want one file", files)
	}
}

// nnInsertList stores n networks uploaded an hour apart (nn-...0 first), every third a
// master net, net i with i downloads, uploaded by alice or bob in turn.
func nnInsertList(t *testing.T, db *rundb.DB, n int) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		user := "alice"
		if i%2 == 1 {
			user = "bob"
		}
		nn := &rundb.NN{Name: fmt.Sprintf("nn-%012x.nnue", i), User: user, Downloads: i, IsMaster: i%3 == 0,
			Extra: rundb.Extra{"_id": bson.NewObjectIDFromTimestamp(start.Add(time.Duration(i) * time.Hour))}}
		if err := db.NNs.Insert(context.Background(), nn); err != nil {
			t.Fatal(err)
		}
	}
}

var nnListedRE = regexp.MustCompile(`<a class="mono" href="/api/nn/(nn-[0-9a-f]{12}\.nnue)">`)

// nnListed returns the networks a /nns page lists, in order.
func nnListed(page string) []string {
	var names []string
	for _, m := range nnListedRE.FindAllStringSubmatch(page, -1) {
		names = append(names, m[1])
	}
	return names
}

func nnNameN(i int) string { return fmt.Sprintf("nn-%012x.nnue", i) }

func TestUINNList(t *testing.T) {
	env := newUIEnv(t)
	nnInsertList(t, env.DB, 30)
	b := env.anon()

	t.Run("newest first 25 a page with the totals", func(t *testing.T) {
		w := b.Get("/nns")
		page := body(w)
		got := nnListed(page)
		if w.Code != http.StatusOK || len(got) != 25 || got[0] != nnNameN(29) || got[24] != nnNameN(5) {
			t.Fatalf("GET /nns = %d listing %v", w.Code, got)
		}
		// 30 nets, 10 master nets (0, 3, ..., 27), 2 contributors, 0+1+...+29 = 435 downloads.
		for _, want := range []string{`<span class="value">30</span><span class="label">Nets</span>`,
			`<span class="value">10</span><span class="label">Master nets</span>`,
			`<span class="value">2</span><span class="label">Contributors</span>`,
			`<span class="value">435</span><span class="label">Downloads</span>`,
			`href="/nns?page=2"`} {
			if !strings.Contains(page, want) {
				t.Errorf("/nns lacks %s", want)
			}
		}
	})
	cases := []struct {
		name, query string
		want        []string
	}{
		{"the second page", "page=2", []string{nnNameN(4), nnNameN(3), nnNameN(2), nnNameN(1), nnNameN(0)}},
		{"a page past the end is the last", "page=99", []string{nnNameN(4), nnNameN(3), nnNameN(2), nnNameN(1), nnNameN(0)}},
		{"a name substring", "network_name=00000000001", []string{nnNameN(0x1d), nnNameN(0x1c), nnNameN(0x1b), nnNameN(0x1a),
			nnNameN(0x19), nnNameN(0x18), nnNameN(0x17), nnNameN(0x16), nnNameN(0x15), nnNameN(0x14), nnNameN(0x13),
			nnNameN(0x12), nnNameN(0x11), nnNameN(0x10), nnNameN(0x01)}},
		{"an uploader in any case", "user=BO&sort=name&order=asc", []string{nnNameN(1), nnNameN(3), nnNameN(5), nnNameN(7), nnNameN(9),
			nnNameN(11), nnNameN(13), nnNameN(15), nnNameN(17), nnNameN(19), nnNameN(21), nnNameN(23), nnNameN(25), nnNameN(27), nnNameN(29)}},
		{"master nets only", "master_only=1&sort=time&order=asc", []string{nnNameN(0), nnNameN(3), nnNameN(6), nnNameN(9),
			nnNameN(12), nnNameN(15), nnNameN(18), nnNameN(21), nnNameN(24), nnNameN(27)}},
		{"most downloaded first", "sort=downloads&order=desc&master_only=on&user=alice", []string{nnNameN(24), nnNameN(18), nnNameN(12), nnNameN(6), nnNameN(0)}},
		{"an unknown sort is by time", "sort=password&order=asc&user=bob&network_name=00000000000", []string{nnNameN(1), nnNameN(3), nnNameN(5), nnNameN(7), nnNameN(9), nnNameN(11), nnNameN(13), nnNameN(15)}},
		{"nothing matches", "network_name=zzz", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := b.Get("/nns?" + c.query)
			page := body(w)
			if got := nnListed(page); w.Code != http.StatusOK || !slices.Equal(got, c.want) {
				t.Errorf("GET /nns?%s = %d listing %v, want %v", c.query, w.Code, got, c.want)
			}
			if c.want == nil && !strings.Contains(page, "No networks match these filters.") {
				t.Errorf("an empty result does not say so")
			}
		})
	}
	t.Run("the filters stay in the form", func(t *testing.T) {
		page := body(b.Get("/nns?network_name=abc&user=%3Cb%3E&master_only=1"))
		for _, want := range []string{`name="network_name" value="abc"`, `name="user" value="&lt;b&gt;"`, `name="master_only" value="1" checked`} {
			if !strings.Contains(page, want) {
				t.Errorf("/nns lacks %s", want)
			}
		}
	})
}

// first and last tests link to their runs.
func TestUINNListShowsTests(t *testing.T) {
	env := newUIEnv(t)
	runID := "0123456789abcdef01234567"
	nn := &rundb.NN{Name: nnNameN(1), User: "alice", IsMaster: true, Extra: rundb.Extra{
		"first_test": bson.D{{Key: "date", Value: time.Date(2026, 2, 3, 4, 5, 0, 0, time.UTC)}, {Key: "id", Value: runID}},
		"last_test":  bson.D{{Key: "date", Value: time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)}, {Key: "id", Value: runID}},
	}}
	if err := env.DB.NNs.Insert(context.Background(), nn); err != nil {
		t.Fatal(err)
	}
	page := body(env.anon().Get("/nns"))
	for _, want := range []string{`<a href="/tests/view/` + runID + `">2026-02-03 04:05</a>`,
		`<a href="/tests/view/` + runID + `">2026-03-04 05:06</a>`, `class="master"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/nns lacks %s:\n%s", want, page)
		}
	}
}

func TestUISPRTCalc(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	t.Run("fishtest's defaults", func(t *testing.T) {
		w := b.Get("/sprt_calc")
		page := body(w)
		// Normalized [0, 2] at a draw ratio of 0.49 and an RMS bias of 191: the bounds are 0 and
		// 1.02 logistic Elo, and a test at either takes 159,942 games on average.
		for _, want := range []string{"<strong>0.00</strong> and <strong>1.02</strong>", "<strong>159,942</strong>",
			`<svg class="chart"`, `value="0.49"`, `<option value="Normalized" selected>`} {
			if !strings.Contains(page, want) {
				t.Errorf("/sprt_calc lacks %s", want)
			}
		}
		if w.Code != http.StatusOK {
			t.Errorf("GET /sprt_calc = %d", w.Code)
		}
	})
	t.Run("a logistic test", func(t *testing.T) {
		w := b.Get("/sprt_calc?elo-model=logistic&elo-0=0&elo-1=2&draw-ratio=0.49&rms-bias=191")
		page := body(w)
		// Halfway between the bounds the test is a coin toss after 67,941 games; at the bounds
		// it passes 5% and 95% of the time.
		rows := regexp.MustCompile(`(?s)<tr[^>]*>\s*<td class="num">([-0-9.]+)(?: <span class="badge blue">(Elo[01])</span>)?</td>\s*<td class="num">([0-9.]+)%</td>\s*<td class="num">([0-9,]+)</td>`).FindAllStringSubmatch(page, -1)
		found := map[string][]string{}
		for _, r := range rows {
			found[r[1]] = r[2:]
		}
		for elo, want := range map[string][]string{
			"0.00": {"Elo0", "5.0", "41,534"}, "1.00": {"", "50.0", "67,941"}, "2.00": {"Elo1", "95.0", "41,534"},
		} {
			if got := found[elo]; !slices.Equal(got, want) {
				t.Errorf("row at Elo %s = %v, want %v", elo, got, want)
			}
		}
		if w.Code != http.StatusOK || len(rows) < 9 || !strings.Contains(page, `<option value="Logistic" selected>`) {
			t.Errorf("GET = %d with %d rows", w.Code, len(rows))
		}
	})
	cases := []struct {
		name, query, field, message string
	}{
		{"an unreadable Elo0", "elo-0=abc", "elo-0", "Elo0 must be a number."},
		{"NaN", "elo-1=NaN", "elo-1", "Elo1 must be a number."},
		{"bounds too close", "elo-0=1&elo-1=1.2", "elo-1", "Elo1 must be at least 0.5 above Elo0."},
		{"a bound too large", "elo-0=-11", "elo-0", "Elo0 must be between -10 and 10."},
		{"a draw ratio of 1", "draw-ratio=1", "draw-ratio", "The draw ratio must be between 0 and 1"},
		{"a negative RMS bias", "rms-bias=-5", "rms-bias", "The RMS bias must be 0 or more."},
		{"a bias the draw ratio cannot hold", "draw-ratio=0.9&rms-bias=300", "rms-bias", "This RMS bias is too large for the draw ratio"},
		{"an unknown model", "elo-model=BayesElo", "elo-model", "Choose the normalized or the logistic Elo model."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := b.Get("/sprt_calc?" + c.query)
			page := body(w)
			if w.Code != http.StatusBadRequest || !strings.Contains(page, c.message) {
				t.Fatalf("GET /sprt_calc?%s = %d, want 400 with %q:\n%s", c.query, w.Code, c.message, page)
			}
			if !strings.Contains(page, `id="err-`+c.field+`"`) || !strings.Contains(page, `aria-describedby="err-`+c.field+`"`) {
				t.Errorf("the error is not marked on field %s", c.field)
			}
			if strings.Contains(page, `<svg`) {
				t.Errorf("a refused form still shows results")
			}
		})
	}
	t.Run("what was typed stays", func(t *testing.T) {
		page := body(b.Get("/sprt_calc?elo-0=abc&elo-1=3"))
		if !strings.Contains(page, `name="elo-0" value="abc"`) || !strings.Contains(page, `name="elo-1" value="3"`) {
			t.Errorf("the form lost what was typed")
		}
	})
}

// A secondary instance shows the form but stores nothing: uploads go to the primary.
func TestUINNUploadOnASecondary(t *testing.T) {
	env := newUIEnv(t)
	secondary, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: env.Deps.Tokens, Version: "test",
		DB: env.DB, Runs: env.Runs, DataDir: env.Deps.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	senv := *env
	senv.Server = secondary
	b := senv.as("alice")
	content := nnContent("secondary")
	w := b.nnUpload(nnNameOf(content), content, nnUploadOpts{token: b.nnToken()})
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("upload on a secondary = %d, want 503:\n%s", w.Code, body(w))
	}
	if files := env.nnFiles(); len(files) != 0 {
		t.Errorf("an upload on a secondary left %v", files)
	}
	if acts := env.nnUploadActions(); len(acts) != 0 {
		t.Errorf("an upload on a secondary recorded %d actions", len(acts))
	}
}

// A network uploaded through the form is what /api/nn serves.
func TestNNDownloadAfterUpload(t *testing.T) {
	env := newUIEnv(t)
	b := env.as("alice")
	content := nnContent("round trip")
	name := nnNameOf(content)
	if w := b.nnUpload(name, content, nnUploadOpts{token: b.nnToken()}); w.Code != http.StatusSeeOther {
		t.Fatalf("upload = %d:\n%s", w.Code, body(w))
	}
	w := env.anon().Get("/api/nn/" + name)
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), content) {
		t.Fatalf("download = %d with %d bytes, want the %d uploaded", w.Code, w.Body.Len(), len(content))
	}
	if n, err := env.DB.NNs.Get(context.Background(), name); err != nil || n.Downloads != 1 {
		t.Errorf("downloads = %+v, %v; want 1", n, err)
	}
	if page := body(env.anon().Get("/nns")); !bytes.Contains([]byte(page), []byte(`<td class="num">1</td>`)) {
		t.Errorf("/nns does not show the download")
	}
}
