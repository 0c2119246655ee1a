package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/api"
)

// isAPI reports whether a path answers in JSON rather than HTML.
func isAPI(path string) bool { return strings.HasPrefix(path, "/api/") }

// pageError is the one path from an error to an HTML reply.
func (s *Server) pageError(c *gin.Context, status int, msg string) {
	setPageHeaders(c.Writer.Header())
	s.render(c, status, "error", struct {
		page
		Status  int
		Message string
	}{s.page(c, http.StatusText(status)), status, msg})
	c.Abort()
}

// fail answers an error in the shape the path calls for.
func (s *Server) fail(c *gin.Context, status int, msg string) {
	if isAPI(c.Request.URL.Path) {
		api.Error(c, status, msg)
		return
	}
	s.pageError(c, status, msg)
}
