package api

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// A network uploaded through the web UI is stored gzipped at DataDir/nn/{name}.gz (server/ui);
// DownloadNN (readapi.go) finds it through Deps.NetworkFile and sends it with serveNN.

// serveNN sends the stored network at path for GET or HEAD /api/nn/{name}. It returns false,
// having sent nothing, if the file is gone, so that the caller can fall back to the redirect.
func (s *Server) serveNN(c *gin.Context, name, path string) bool {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		s.internalError(c, fmt.Errorf("open network %s: %w", name, err))
		return true
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.internalError(c, fmt.Errorf("open network %s: %w", name, err))
		return true
	}
	h := c.Writer.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", attachment(name))
	h.Add("Vary", "Accept-Encoding")
	if nnAcceptsGzip(c.Request.Header.Values("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		c.Status(http.StatusOK)
		if c.Request.Method == http.MethodHead {
			return true
		}
		if _, err := io.Copy(c.Writer, f); err != nil {
			_ = c.Error(fmt.Errorf("send network %s: %w", name, err))
		}
		return true
	}
	// The network's own size is in the gzip trailer (modulo 2^32; networks are far smaller):
	// announcing it lets a client notice a reply cut short, by a read error say.
	size, err := nnGzipSize(f, fi.Size())
	if err != nil {
		s.internalError(c, fmt.Errorf("read network %s: %w", name, err))
		return true
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		s.internalError(c, fmt.Errorf("read network %s: %w", name, err))
		return true
	}
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	c.Status(http.StatusOK)
	if c.Request.Method == http.MethodHead {
		return true
	}
	if _, err := io.Copy(c.Writer, zr); err != nil {
		_ = c.Error(fmt.Errorf("send network %s: %w", name, err))
	}
	return true
}

// nnGzipSize reads the uncompressed size from the trailer of the gzip file f of the given size,
// and leaves f at its start.
func nnGzipSize(f *os.File, size int64) (int64, error) {
	if size < 18 { // the smallest gzip file: a 10-byte header and an 8-byte trailer
		return 0, errors.New("not a gzip file")
	}
	var b [4]byte
	if _, err := f.ReadAt(b[:], size-4); err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint32(b[:])), nil
}

// nnAcceptsGzip reports whether Accept-Encoding header values allow gzip: listed (or "*") without
// q=0.
func nnAcceptsGzip(values []string) bool {
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(item, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "x-gzip" && coding != "*" {
				continue
			}
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, v, _ := strings.Cut(p, "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			if q > 0 {
				return true
			}
		}
	}
	return false
}
