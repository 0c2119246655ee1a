package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
)

// DefaultMaxPGNBytes is the largest compressed PGN a worker may upload for one task. A task's
// PGN is stored in one pgns document, and MongoDB (and FerretDB) refuse documents over 16 MiB;
// 15 MiB leaves room for the document's other fields and is still several times what the
// biggest tasks produce (a few thousand games at roughly 1-2 KB each once compressed), so an
// upload this limit refuses would have failed at the insert anyway, with a less clear error.
const DefaultMaxPGNBytes = 15 << 20

// DefaultMaxPGNText is the most PGN text one task's upload may inflate to: far more than the
// biggest tasks' games (a few KB each), far less than what a gzip bomb of DefaultMaxPGNBytes
// would make (about a thousand times its size).
const DefaultMaxPGNText = 256 << 20

// gzipMagic starts every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// decodePGNUpload decodes upload_pgn's pgn field: standard base64 of gzip data. It checks the
// gzip magic bytes, as fishtest does, refuses data over maxBytes (<= 0 means
// DefaultMaxPGNBytes) before decoding it, and refuses gzip data that inflates to more than
// maxText (<= 0 means DefaultMaxPGNText) while it inflates it. The error says what is wrong in
// words a worker's owner can act on.
func decodePGNUpload(b64 string, maxBytes int, maxText int64) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPGNBytes
	}
	if maxText <= 0 {
		maxText = DefaultMaxPGNText
	}
	if b64 == "" {
		return nil, errors.New("pgn is empty")
	}
	// Checked on the encoded length first, so an oversized upload costs no allocation.
	if n := base64.StdEncoding.DecodedLen(len(b64)); n > maxBytes+2 {
		return nil, fmt.Errorf("pgn is about %d bytes compressed, over the limit of %d bytes", n, maxBytes)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("pgn is not valid base64: %v", err)
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("pgn is %d bytes compressed, over the limit of %d bytes", len(data), maxBytes)
	}
	if len(data) < len(gzipMagic) || data[0] != gzipMagic[0] || data[1] != gzipMagic[1] {
		return nil, errors.New("pgn is not gzip data (it does not start with the bytes 1f 8b)")
	}
	if err := checkPGNText(data, maxText); err != nil {
		return nil, err
	}
	return data, nil
}

// gzipReaders are the readers checkPGNText inflates uploads with (*pooledGzip): each holds a
// 32 kB window, which a fresh reader per upload would allocate anew.
var gzipReaders sync.Pool

// pooledGzip is a gzip reader and the reader of the bytes it inflates.
type pooledGzip struct {
	zr  *gzip.Reader
	src bytes.Reader
}

// checkPGNText inflates gzip data as a stream, into nothing, and refuses it if it is not whole,
// valid gzip or if it inflates to more than maxText bytes: nothing is stored that would
// overwhelm whoever downloads and unpacks it.
func checkPGNText(data []byte, maxText int64) error {
	r, _ := gzipReaders.Get().(*pooledGzip)
	if r == nil {
		r = &pooledGzip{}
	}
	r.src.Reset(data)
	var err error
	if r.zr == nil {
		r.zr, err = gzip.NewReader(&r.src)
	} else {
		err = r.zr.Reset(&r.src)
	}
	defer func() {
		r.src.Reset(nil) // the pool must not keep this upload alive
		if r.zr != nil {
			gzipReaders.Put(r) // Reset readies it for the next upload, whatever this one held
		}
	}()
	zr := r.zr
	if err != nil {
		return fmt.Errorf("pgn is not valid gzip data: %v", err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(zr, maxText+1))
	switch {
	case err != nil:
		return fmt.Errorf("pgn is not valid gzip data: %v", err)
	case n > maxText:
		return fmt.Errorf("pgn inflates to more than the limit of %d bytes", maxText)
	}
	return nil
}

// attachment is a Content-Disposition header offering the reply as a file named name, quoted
// as fishtest quotes it. (Part of name comes from the URL; net/http turns any newline in a
// header value into a space.)
func attachment(name string) string {
	return `attachment; filename="` + quoteEscaper.Replace(name) + `"`
}

var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// DownloadPGN is GET /api/pgn/{run id}-{task id}.pgn: one task's games, stored gzipped and
// sent as is, as a gzip file to save. Not with Content-Encoding: gzip, which makes browsers and
// HTTP clients inflate whatever was stored, a gzip bomb uploaded before uploads were checked
// included. The name is cut at its first '.', as in fishtest.
func (s *Server) DownloadPGN(c *gin.Context) {
	name := c.Param("name")
	runTask, _, _ := strings.Cut(name, ".")
	var p *rundb.PGN
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		p, err = s.deps.PGNs.Get(ctx, runTask)
		return err
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		Error(c, http.StatusNotFound, "No data found for "+name)
		return
	case err != nil:
		s.internalError(c, err)
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Length", strconv.Itoa(len(p.PGNZip)))
	h.Set("Content-Disposition", attachment(strings.TrimSuffix(name, ".gz")+".gz"))
	c.Status(http.StatusOK)
	if c.Request.Method == http.MethodHead {
		return
	}
	if _, err := c.Writer.Write(p.PGNZip); err != nil {
		_ = c.Error(fmt.Errorf("send pgn %s: %w", runTask, err))
	}
}

// runPGNsName is the only file name /api/run_pgns serves: a run id and .pgn.gz.
var runPGNsName = regexp.MustCompile(`^([a-zA-Z0-9]+)\.pgn\.gz$`)

// DownloadRunPGNs is GET /api/run_pgns/{run id}.pgn.gz: every stored task PGN of the run, in
// task order, one gzip member after another. A concatenation of gzip streams is itself a valid
// gzip file (RFC 1952), so gunzip gives the games of all tasks; unlike /api/pgn it is sent as a
// file, without Content-Encoding. Content-Length is the sum of the stored sizes.
//
// The PGNs are read one at a time, each under its own database token, and written to the client
// between reads: memory stays at one task's PGN and a slow client holds no token. If a PGN
// vanishes or changes size after the headers are sent, the reply is cut short, which the client
// sees as a truncated download (Content-Length promised more).
func (s *Server) DownloadRunPGNs(c *gin.Context) {
	name := c.Param("name")
	m := runPGNsName.FindStringSubmatch(name)
	if m == nil {
		Error(c, http.StatusBadRequest, "Invalid filename format for "+name)
		return
	}
	runID := m[1]
	var list []rundb.PGNInfo
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		list, err = s.deps.PGNs.ListForRun(ctx, runID)
		return err
	})
	if err != nil {
		s.internalError(c, err)
		return
	}
	total := 0
	for _, p := range list {
		total += p.Size
	}
	if len(list) == 0 || total == 0 {
		Error(c, http.StatusNotFound, "No data found for "+name)
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Length", strconv.Itoa(total))
	h.Set("Content-Disposition", attachment(name))
	c.Status(http.StatusOK)
	if c.Request.Method == http.MethodHead {
		return
	}
	for _, info := range list {
		var p *rundb.PGN
		err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
			var err error
			p, err = s.deps.PGNs.Get(ctx, info.RunID)
			return err
		})
		if err == nil && len(p.PGNZip) != info.Size {
			err = fmt.Errorf("pgn %s holds %d bytes but its size field says %d", info.RunID, len(p.PGNZip), info.Size)
		}
		if err != nil {
			s.logger.Error("run pgns download cut short", "run", runID, "pgn", info.RunID, "err", err)
			_ = c.Error(err)
			return
		}
		if _, err := c.Writer.Write(p.PGNZip); err != nil {
			_ = c.Error(fmt.Errorf("send pgns of run %s: %w", runID, err))
			return // the client went away
		}
	}
}
