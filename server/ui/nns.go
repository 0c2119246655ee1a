package ui

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/chart"
	"github.com/shoal-chess/shoal/stats"
)

// Networks (NNUE files) are uploaded through /upload, listed on /nns and downloaded by workers
// from /api/nn/{name}. Each is stored gzipped at DataDir/nn/{name}.gz, the layout fishtest's
// nginx serves from, so an existing fishtest nn directory can be copied in as is.

// nnNameRE is the only name a network may have: "nn-", the first 12 hex digits of the SHA-256
// of its contents, ".nnue".
var nnNameRE = regexp.MustCompile(`^nn-([0-9a-f]{12})\.nnue$`)

// DefaultMaxNetworkSize is the size a network must stay below, as in fishtest.
const DefaultMaxNetworkSize = 200 << 20

// nnsPageSize is the number of networks per page of /nns, as in fishtest.
const nnsPageSize = 25

// maxNNFilter bounds the length of the /nns search fields.
const maxNNFilter = 100

// maxNetworkSize is the size a network must stay below here: Deps.MaxNetworkSize, or the
// default.
func (s *Server) maxNetworkSize() int64 {
	if s.deps.MaxNetworkSize > 0 {
		return s.deps.MaxNetworkSize
	}
	return DefaultMaxNetworkSize
}

// nnDir is the directory holding the uploaded networks.
func (s *Server) nnDir() string { return filepath.Join(s.deps.DataDir, "nn") }

// NetworkFile returns the stored file of the network called name, or "" if there is none (or no
// data directory). Only proper network names are looked up, so a name cannot reach outside the
// directory.
func (s *Server) NetworkFile(name string) string {
	if s.deps.DataDir == "" || !nnNameRE.MatchString(name) {
		return ""
	}
	path := filepath.Join(s.nnDir(), name+".gz")
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return path
}

// nnsData is the /nns page.
type nnsData struct {
	page
	Nets        []rundb.NNInfo
	Summary     rundb.NNSummary
	Pager       pager
	Sort        sorting
	NetworkName string
	UserFilter  string
	MasterOnly  bool
}

// NNsPage is GET /nns: the networks, newest first by default, with their totals; filters by
// name and uploader (substrings, any case) and master nets only; 25 a page.
func (s *Server) NNsPage(c *gin.Context) {
	d := nnsData{
		NetworkName: clipRunes(strings.TrimSpace(c.Query("network_name")), maxNNFilter),
		UserFilter:  clipRunes(strings.TrimSpace(c.Query("user")), maxNNFilter),
		MasterOnly:  nnTruthy(c.QueryArray("master_only")),
		Sort:        sortParam(c, rundb.NNSortKeys, "time", true),
	}
	f := rundb.NNFilter{Name: d.NetworkName, User: d.UserFilter, MasterOnly: d.MasterOnly}
	ok := s.uiDo(c, func(ctx context.Context) error {
		var err error
		if d.Summary, err = s.deps.Networks.Summary(ctx, f); err != nil {
			return err
		}
		d.Pager = newPager(c, d.Summary.Nets, nnsPageSize)
		d.Nets, err = s.deps.Networks.List(ctx, f, d.Sort.Key, d.Sort.Desc, d.Pager.Skip(), nnsPageSize)
		return err
	})
	if !ok {
		return
	}
	d.page = s.page(c, "Networks")
	s.render(c, http.StatusOK, "nns", d)
}

// nnTruthy reports whether any of a checkbox's values is on ("1", "true", "on", "yes").
func nnTruthy(values []string) bool {
	for _, v := range values {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "on", "yes":
			return true
		}
	}
	return false
}

// uploadData is the /upload form.
type uploadData struct {
	page
	MaxSize string
	Errors  map[string]string // "network", "cc0"
	CC0     bool              // the licence box, as ticked
}

func (s *Server) uploadForm(c *gin.Context, status int, errs map[string]string, cc0 bool) {
	if errs == nil {
		errs = map[string]string{}
	}
	s.render(c, status, "upload", uploadData{page: s.page(c, "Upload a network"),
		MaxSize: nnSize(s.maxNetworkSize()), Errors: errs, CC0: cc0})
}

// nnSize writes a byte count in MB (or bytes when small, as tests make the limit).
func nnSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// UploadPage is GET /upload: the form, for logged-in users.
func (s *Server) UploadPage(c *gin.Context) {
	if _, ok := s.requireUser(c); !ok {
		return
	}
	s.uploadForm(c, http.StatusOK, nil, false)
}

// nnUploadError is a refused upload: the message goes back to the user with the form.
type nnUploadError struct {
	field, msg string
}

func (e *nnUploadError) Error() string { return e.msg }

func nnRefuse(field, format string, args ...any) error {
	return &nnUploadError{field: field, msg: fmt.Sprintf(format, args...)}
}

// UploadSubmit is POST /upload: check the network's name, size and hash, store it gzipped, and
// record it (an nns document and an upload_nn action). A refused upload stores nothing and shows
// the form again with the reason.
func (s *Server) UploadSubmit(c *gin.Context) {
	u, ok := s.requireUser(c)
	if !ok || !s.requirePrimaryPage(c) {
		return
	}
	if s.deps.DataDir == "" {
		s.PageError(c, http.StatusServiceUnavailable, "This server has no data directory to keep networks in.")
		return
	}
	s.transfers.AllowSlowBody(c) // only once someone is logged in
	up, err := s.openUpload(c)
	if err == nil {
		defer up.file.Close()
		err = s.storeNetwork(c, u, up)
	}
	var refused *nnUploadError
	switch {
	case err == nil:
		s.flash(c, "success", "Network "+up.name+" uploaded.")
		s.redirect(c, "/nns")
	case errors.Is(err, errUploadCSRF):
		s.PageError(c, http.StatusForbidden, "This form has expired or did not come from Shoal. Go back, reload the page and try again.")
	case errors.As(err, &refused):
		s.uploadForm(c, http.StatusBadRequest, map[string]string{refused.field: refused.msg}, up.cc0)
	default:
		s.uiError(c, err)
	}
}

// nnUploadPart is the network part of an upload form.
type nnUploadPart struct {
	name string
	file io.ReadCloser // the file, a stream; storeNetwork enforces the size limit
	cc0  bool          // the licence box was ticked
}

// openUpload finds the network in the request, read as a stream bounded by the size limit
// (openFileUpload): the CSRF token and the licence box must come before the file, as the form
// places them.
func (s *Server) openUpload(c *gin.Context) (nnUploadPart, error) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.maxNetworkSize()+1<<20)
	fu, err := openFileUpload(c, "network", "cc0")
	up := nnUploadPart{name: fu.name, file: fu.file, cc0: nnTruthy([]string{fu.fields["cc0"]})}
	switch {
	case errors.Is(err, errUploadCSRF):
		return up, err
	case errors.Is(err, errUploadNoFile):
		return up, nnRefuse("network", "Choose a network file to upload.")
	case err != nil:
		return up, s.nnUploadReadError(err)
	case !up.cc0:
		return up, nnRefuse("cc0", "Confirm that the network may be shared under the CC0 licence.")
	}
	return up, nil
}

// nnUploadReadError explains a failure to read the upload.
func (s *Server) nnUploadReadError(err error) error {
	if tooBig(err) {
		return nnRefuse("network", "The network must be smaller than %s.", nnSize(s.maxNetworkSize()))
	}
	return nnRefuse("network", "The upload could not be read (%v); try again.", err)
}

// storeNetwork checks and stores one uploaded network. The file is written to a temporary file
// beside its final place while its hash is computed, read back and checked, and only then
// linked to its name (which fails if a network of that name appeared meanwhile), so that a
// refused or failed upload leaves nothing behind.
func (s *Server) storeNetwork(c *gin.Context, u *rundb.User, up nnUploadPart) error {
	m := nnNameRE.FindStringSubmatch(up.name)
	if m == nil {
		return nnRefuse("network", "The file name must be nn-<the first 12 hex digits of its SHA-256>.nnue, not %q.", up.name)
	}
	if err := s.checkNewNetwork(c, up.name); err != nil {
		return err
	}
	dir := s.nnDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the networks directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".upload-*.gz")
	if err != nil {
		return fmt.Errorf("store network %s: %w", up.name, err)
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()

	hash := sha256.New()
	gz := gzip.NewWriter(tmp)
	in := &nnReadErrors{r: io.LimitReader(up.file, s.maxNetworkSize())}
	n, err := io.Copy(io.MultiWriter(gz, hash), in)
	switch {
	case in.err != nil:
		return s.nnUploadReadError(in.err)
	case err != nil:
		return fmt.Errorf("store network %s: %w", up.name, err)
	case n >= s.maxNetworkSize():
		return nnRefuse("network", "The network must be smaller than %s.", nnSize(s.maxNetworkSize()))
	case n == 0:
		return nnRefuse("network", "The file is empty.")
	}
	sum := hash.Sum(nil)
	if got := hex.EncodeToString(sum)[:12]; got != m[1] {
		return nnRefuse("network", "Wrong SHA-256: the file's hash begins with %s, but its name says %s.", got, m[1])
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("store network %s: %w", up.name, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("store network %s: %w", up.name, err)
	}
	if err := nnVerifyGzip(tmp.Name(), sum); err != nil {
		return fmt.Errorf("store network %s: %w", up.name, err)
	}
	final := filepath.Join(dir, up.name+".gz")
	if err := nnLinkNew(tmp.Name(), final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nnRefuse("network", "The network %s already exists.", up.name)
		}
		return fmt.Errorf("store network %s: %w", up.name, err)
	}
	if err := s.recordNetwork(c, u, up.name); err != nil {
		_ = os.Remove(final)
		return err
	}
	return nil
}

// nnReadErrors remembers the error of the reader it wraps, to tell a failed upload from a failed
// disk.
type nnReadErrors struct {
	r   io.Reader
	err error
}

func (e *nnReadErrors) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

// checkNewNetwork refuses a network already known by name or already on disk.
func (s *Server) checkNewNetwork(c *gin.Context, name string) error {
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		_, err := s.deps.Networks.Get(ctx, name)
		return err
	})
	switch {
	case err == nil:
		return nnRefuse("network", "The network %s already exists.", name)
	case !errors.Is(err, rundb.ErrNotFound):
		return err
	}
	if _, err := os.Lstat(filepath.Join(s.nnDir(), name+".gz")); err == nil {
		return nnRefuse("network", "The network %s already exists.", name)
	}
	return nil
}

// recordNetwork writes the network's document and the upload_nn action; if either fails,
// neither is left.
func (s *Server) recordNetwork(c *gin.Context, u *rundb.User, name string) error {
	return s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		// A second look: another upload of the same network may have got here first (its file
		// would have stopped this one, unless it was stored by other means).
		if _, err := s.deps.Networks.Get(ctx, name); err == nil {
			return nnRefuse("network", "The network %s already exists.", name)
		} else if !errors.Is(err, rundb.ErrNotFound) {
			return err
		}
		if err := s.deps.Networks.Insert(ctx, &rundb.NN{Name: name, User: u.Username}); err != nil {
			return err
		}
		err := s.deps.Actions.Insert(ctx, &rundb.Action{Action: "upload_nn", Username: u.Username, NN: name})
		if err != nil {
			// The request's context may be what failed: take the document back regardless.
			if derr := s.deps.Networks.Delete(context.WithoutCancel(ctx), name); derr != nil {
				s.logger.Error("take back network after a failed upload", "nn", name, "err", derr)
			}
			return err
		}
		return nil
	})
}

// nnVerifyGzip reads the gzip file at path back and checks its contents hash to sum.
func nnVerifyGzip(path string, sum []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, zr); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if subtle.ConstantTimeCompare(h.Sum(nil), sum) != 1 {
		return errors.New("read back: the stored file does not match the upload")
	}
	return nil
}

// nnLinkNew gives the file at tmp the name final, failing with fs.ErrExist if final exists. A
// hard link cannot replace a file, which is what makes two uploads of one network safe; where
// the file system has no hard links, a rename after a check is the fallback.
func nnLinkNew(tmp, final string) error {
	err := os.Link(tmp, final)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		return err
	}
	if _, serr := os.Lstat(final); serr == nil {
		return fs.ErrExist
	}
	return os.Rename(tmp, final)
}

// The SPRT calculator: what an SPRT with given bounds does, depending on the true Elo of the
// patch: the probability it passes and the games it takes. Everything is computed here and
// sent as a table and two SVG charts; no script is needed. Parameter names are fishtest's, so
// that its calculator links work here.

// sprtCalcForm is the calculator's form, as typed.
type sprtCalcForm struct {
	EloModel, Elo0, Elo1, DrawRatio, RMSBias string
}

// sprtCalcDefaults are fishtest's defaults: a normalized [0, 2] test at STC.
var sprtCalcDefaults = sprtCalcForm{EloModel: "Normalized", Elo0: "0.0", Elo1: "2.0", DrawRatio: "0.49", RMSBias: "191"}

// sprtCalcRow is one line of the result table.
type sprtCalcRow struct {
	Elo   float64 // logistic
	Pass  float64 // percent
	Games float64
	Bound string // "Elo0" or "Elo1" at a bound, else ""
}

// sprtCalcResult is what the calculator found.
type sprtCalcResult struct {
	Elo0, Elo1              float64 // the bounds in logistic Elo
	GamesAtBounds, MaxGames float64
	Rows                    []sprtCalcRow
	PassChart, GamesChart   template.HTML
}

type sprtCalcData struct {
	page
	Form   sprtCalcForm
	Errors map[string]string // by field name: elo-model, elo-0, elo-1, draw-ratio, rms-bias
	Result *sprtCalcResult   // nil when the form has errors
}

// SPRTCalcPage is GET /sprt_calc.
func (s *Server) SPRTCalcPage(c *gin.Context) {
	form := sprtCalcDefaults
	for _, f := range []struct {
		name string
		v    *string
	}{{"elo-model", &form.EloModel}, {"elo-0", &form.Elo0}, {"elo-1", &form.Elo1},
		{"draw-ratio", &form.DrawRatio}, {"rms-bias", &form.RMSBias}} {
		if v, ok := c.GetQuery(f.name); ok {
			*f.v = clipRunes(strings.TrimSpace(v), 40)
		}
	}
	d := sprtCalcData{Form: form, Errors: map[string]string{}}
	oc, errs := parseSPRTCalc(form)
	status := http.StatusOK
	if len(errs) > 0 {
		d.Errors, status = errs, http.StatusBadRequest
	} else {
		d.Form.EloModel = "Logistic"
		if strings.EqualFold(form.EloModel, "normalized") {
			d.Form.EloModel = "Normalized"
		}
		d.Result = sprtCalcTable(oc)
	}
	d.page = s.page(c, "SPRT calculator")
	s.render(c, status, "sprt_calc", d)
}

// parseSPRTCalc checks the form (fishtest's rules: bounds within ±10 and at least 0.5 apart, a
// draw ratio strictly between 0 and 1, a bias of at least 0) and returns the plan's
// characteristics, or an error message for each wrong field.
func parseSPRTCalc(f sprtCalcForm) (*stats.SPRTOC, map[string]string) {
	errs := map[string]string{}
	num := func(field, label, v string) float64 {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			errs[field] = label + " must be a number."
			return 0
		}
		return x
	}
	plan := stats.SPRTPlan{Alpha: 0.05, Beta: 0.05}
	switch strings.ToLower(f.EloModel) {
	case "normalized":
		plan.Model = stats.ModelNormalized
	case "logistic":
		plan.Model = stats.ModelLogistic
	default:
		errs["elo-model"] = "Choose the normalized or the logistic Elo model."
	}
	plan.Elo0 = num("elo-0", "Elo0", f.Elo0)
	plan.Elo1 = num("elo-1", "Elo1", f.Elo1)
	plan.DrawRatio = num("draw-ratio", "The draw ratio", f.DrawRatio)
	plan.RMSBias = num("rms-bias", "The RMS bias", f.RMSBias)
	if _, bad := errs["elo-0"]; !bad && math.Abs(plan.Elo0) > 10 {
		errs["elo-0"] = "Elo0 must be between -10 and 10."
	}
	if _, bad := errs["elo-1"]; !bad && math.Abs(plan.Elo1) > 10 {
		errs["elo-1"] = "Elo1 must be between -10 and 10."
	}
	if errs["elo-0"] == "" && errs["elo-1"] == "" && plan.Elo1 < plan.Elo0+0.5 {
		errs["elo-1"] = "Elo1 must be at least 0.5 above Elo0."
	}
	if _, bad := errs["draw-ratio"]; !bad && !(plan.DrawRatio > 0 && plan.DrawRatio < 1) {
		errs["draw-ratio"] = "The draw ratio must be between 0 and 1 (both excluded)."
	}
	if _, bad := errs["rms-bias"]; !bad && plan.RMSBias < 0 {
		errs["rms-bias"] = "The RMS bias must be 0 or more."
	}
	if len(errs) > 0 {
		return nil, errs
	}
	oc, err := stats.NewSPRTOC(plan)
	switch {
	case errors.Is(err, stats.ErrSPRTPlanVariance):
		return nil, map[string]string{"rms-bias": "This RMS bias is too large for the draw ratio: the openings' bias would explain more than all the variance of the games."}
	case err != nil:
		return nil, map[string]string{"elo-1": "These bounds cannot be used: " + err.Error() + "."}
	}
	return oc, nil
}

// sprtCalcTable evaluates the characteristics over the Elo range fishtest's calculator shows:
// a third of the bounds' distance beyond each, rounded out to whole Elo.
func sprtCalcTable(oc *stats.SPRTOC) *sprtCalcResult {
	e0, e1 := oc.LogisticElo0, oc.LogisticElo1
	if e0 == 0 {
		e0 = 0 // not -0, which would show as "-0.00"
	}
	r := &sprtCalcResult{Elo0: e0, Elo1: e1}
	_, r.GamesAtBounds = oc.At(e0)
	span := e1 - e0
	start, end := math.Floor(e0-span/3), math.Ceil(e1+span/3)

	// The charts: 10 or 20 points an Elo, and the bounds themselves.
	perElo := 10.0
	if end-start <= 5 {
		perElo = 20
	}
	var xs, pass, games []float64
	add := func(elo float64) {
		p, g := oc.At(elo)
		xs, pass, games = append(xs, elo), append(pass, 100*p), append(games, g)
		r.MaxGames = math.Max(r.MaxGames, g)
	}
	for i := math.Round(start * perElo); i <= math.Round(end*perElo); i++ {
		elo := i / perElo
		add(elo)
		for _, b := range []float64{e0, e1} {
			if elo < b && (i+1)/perElo > b {
				add(b)
			}
		}
	}
	// The table: about a dozen round steps, and a row at each bound.
	step := 0.1
	for _, st := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2} {
		step = st
		if (end-start)/st <= 16 {
			break
		}
	}
	bound := func(elo float64) string {
		switch {
		case math.Abs(elo-e0) < 1e-9:
			return "Elo0"
		case math.Abs(elo-e1) < 1e-9:
			return "Elo1"
		}
		return ""
	}
	row := func(elo float64) {
		p, g := oc.At(elo)
		r.Rows = append(r.Rows, sprtCalcRow{Elo: elo, Pass: 100 * p, Games: g, Bound: bound(elo)})
	}
	for i := math.Round(start / step); i <= math.Round(end/step); i++ {
		elo := i * step
		row(elo)
		for _, b := range []float64{e0, e1} {
			if elo+1e-9 < b && (i+1)*step-1e-9 > b {
				row(b)
			}
		}
	}

	marker := func(name string, elo, top float64) chart.Series {
		return chart.Series{Name: fmt.Sprintf("%s = %.2f", name, elo), X: []float64{elo, elo}, Y: []float64{0, top}}
	}
	r.PassChart = chart.Line(chart.Chart{
		Title: "Pass probability", XLabel: "True Elo (logistic)", YLabel: "Pass probability (%)",
		Series: []chart.Series{{Name: "Pass probability (%)", X: xs, Y: pass},
			marker("Elo0", e0, 100), marker("Elo1", e1, 100)},
		HLines: []chart.HLine{{Y: 5, Label: "5%"}, {Y: 95, Label: "95%"}},
	})
	r.GamesChart = chart.Line(chart.Chart{
		Title: "Expected number of games", XLabel: "True Elo (logistic)", YLabel: "Games",
		Series: []chart.Series{{Name: "Expected games", X: xs, Y: games},
			marker("Elo0", e0, r.MaxGames), marker("Elo1", e1, r.MaxGames)},
	})
	return r
}
