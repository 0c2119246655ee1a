package server

import (
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"
)

// runFuncs are this area's template functions.
var runFuncs = template.FuncMap{}

func (s *Server) testsPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) finishedPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) userTestsPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) machinesPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) viewPage(c *gin.Context) { s.pageError(c, http.StatusNotImplemented, "not built yet") }

func (s *Server) tasksPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) liveEloPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) statsPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) homeEvents(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) runEvents(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}
