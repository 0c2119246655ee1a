package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// The access log records every request at debug level and a 5xx at error level whatever the
// level: an operator who turns debug on sees each request, and one who does not still sees
// each failure.
func TestAccessLogLevels(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelWarn} {
		t.Run(level.String(), func(t *testing.T) {
			var out bytes.Buffer // servertest.Do serves in this goroutine
			s, err := New(Deps{
				Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level})),
				Tokens: tokenpool.New(4), Version: "test", Database: "the test database",
			})
			if err != nil {
				t.Fatal(err)
			}
			s.engine.GET("/api/broken", func(c *gin.Context) { c.AbortWithStatus(http.StatusBadGateway) })
			if w := servertest.Do(s.Handler(), http.MethodGet, "/healthz"); w.Code != http.StatusOK {
				t.Fatalf("GET /healthz = %d", w.Code)
			}
			if w := servertest.Do(s.Handler(), http.MethodGet, "/api/broken"); w.Code != http.StatusBadGateway {
				t.Fatalf("GET /api/broken = %d", w.Code)
			}
			logged := out.String()
			ok := strings.Contains(logged, "msg=request ") && strings.Contains(logged, "path=/healthz status=200")
			if ok != (level == slog.LevelDebug) {
				t.Errorf("at %s, the 200 logged: %v, want %v:\n%s", level, ok, level == slog.LevelDebug, logged)
			}
			if !strings.Contains(logged, `level=ERROR msg="request failed"`) || !strings.Contains(logged, "path=/api/broken status=502") {
				t.Errorf("at %s, the 502 is not logged as an error:\n%s", level, logged)
			}
		})
	}
}
