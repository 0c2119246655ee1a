package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/api"
)

// checkPGNText reuses its gzip readers: a reader that last saw a broken or oversized upload
// must judge the next one on its own bytes.
func TestCheckPGNTextJudgesEachUploadAlone(t *testing.T) {
	good := gzipped(t, "[Event \"x\"]\n1. e4 e5 *\n")
	big := gzipped(t, strings.Repeat("1. e4 e5 ", 1000))
	truncated := good[:len(good)-6]
	for i, c := range []struct {
		data []byte
		ok   bool
	}{{good, true}, {[]byte("not gzip"), false}, {good, true}, {truncated, false}, {good, true},
		{big, false}, {good, true}, {truncated, false}, {[]byte("not gzip"), false}, {good, true}} {
		if err := api.CheckPGNText(c.data, 1000); (err == nil) != c.ok {
			t.Errorf("upload %d: %v, want ok %v", i, err, c.ok)
		}
	}
}

// A body shorter than its Content-Length is a 400, not a body read short or padded.
func TestReadBodyRefusesABodyShorterThanItsLength(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, c := range []struct {
		body   string
		length int64
		ok     bool
	}{{`{"a": 1}`, 8, true}, {`{"a": 1}`, 20, false}, {`{"a": 1}`, -1, true}, {strings.Repeat("x", 64), 64, false}} {
		rec := httptest.NewRecorder()
		ctx, _ := gin.CreateTestContext(rec)
		ctx.Request = httptest.NewRequest(http.MethodPost, "/api/beat", strings.NewReader(c.body))
		ctx.Request.ContentLength = c.length
		b, ok := api.ReadBody(ctx, 32)
		switch {
		case ok != c.ok:
			t.Errorf("body of %d bytes, Content-Length %d: ok %v (status %d), want %v", len(c.body), c.length, ok, rec.Code, c.ok)
		case ok && string(b) != c.body:
			t.Errorf("body %q read as %q", c.body, b)
		case !ok && rec.Code != http.StatusBadRequest:
			t.Errorf("body of %d bytes, Content-Length %d: status %d, want 400", len(c.body), c.length, rec.Code)
		}
	}
}
