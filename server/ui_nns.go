package server

import (
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"
)

// nnFuncs are this area's template functions.
var nnFuncs = template.FuncMap{}

func (s *Server) nnsPage(c *gin.Context) { s.pageError(c, http.StatusNotImplemented, "not built yet") }

func (s *Server) uploadPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) uploadSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) sprtCalcPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}
