package server

import (
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/api"
)

// isAPI reports whether a path answers in JSON rather than HTML.
func isAPI(path string) bool { return strings.HasPrefix(path, "/api/") }

// fail answers an error in the shape the path calls for.
func (s *Server) fail(c *gin.Context, status int, msg string) {
	if isAPI(c.Request.URL.Path) {
		api.Error(c, status, msg)
		return
	}
	s.ui.PageError(c, status, msg)
}
