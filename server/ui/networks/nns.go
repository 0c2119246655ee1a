package networks

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/ui"
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
	ui.Page
	Nets        []rundb.NNInfo
	Summary     rundb.NNSummary
	Pager       ui.Pager
	Sort        ui.Sorting
	NetworkName string
	UserFilter  string
	MasterOnly  bool
}

// NNsPage is GET /nns: the networks, newest first by default, with their totals; filters by
// name and uploader (substrings, any case) and master nets only; 25 a page.
func (s *Server) NNsPage(c *gin.Context) {
	d := nnsData{
		NetworkName: ui.ClipRunes(strings.TrimSpace(c.Query("network_name")), maxNNFilter),
		UserFilter:  ui.ClipRunes(strings.TrimSpace(c.Query("user")), maxNNFilter),
		MasterOnly:  nnTruthy(c.QueryArray("master_only")),
		Sort:        ui.SortParam(c, rundb.NNSortKeys, "time", true),
	}
	f := rundb.NNFilter{Name: d.NetworkName, User: d.UserFilter, MasterOnly: d.MasterOnly}
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var err error
		if d.Summary, err = s.deps.Networks.Summary(ctx, f); err != nil {
			return err
		}
		d.Pager = ui.NewPager(c, d.Summary.Nets, nnsPageSize)
		d.Nets, err = s.deps.Networks.List(ctx, f, d.Sort.Key, d.Sort.Desc, d.Pager.Skip(), nnsPageSize)
		return err
	})
	if !ok {
		return
	}
	d.Page = s.ui.Page(c, "Networks")
	s.ui.Render(c, http.StatusOK, "nns", d)
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
	ui.Page
	MaxSize string
	Errors  map[string]string // "network", "cc0"
	CC0     bool              // the licence box, as ticked
}

func (s *Server) uploadForm(c *gin.Context, status int, errs map[string]string, cc0 bool) {
	if errs == nil {
		errs = map[string]string{}
	}
	s.ui.Render(c, status, "upload", uploadData{Page: s.ui.Page(c, "Upload a network"),
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
	if _, ok := s.ui.RequireUser(c); !ok {
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
	u, ok := s.ui.RequireUser(c)
	if !ok || !s.ui.RequirePrimary(c) {
		return
	}
	if s.deps.DataDir == "" {
		s.ui.PageError(c, http.StatusServiceUnavailable, "This server has no data directory to keep networks in.")
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
		s.ui.Flash(c, "success", "Network "+up.name+" uploaded.")
		s.ui.Redirect(c, "/nns")
	case errors.Is(err, errUploadCSRF):
		s.ui.PageError(c, http.StatusForbidden, "This form has expired or did not come from Shoal. Go back, reload the page and try again.")
	case errors.As(err, &refused):
		s.uploadForm(c, http.StatusBadRequest, map[string]string{refused.field: refused.msg}, up.cc0)
	default:
		s.ui.Error(c, err)
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
