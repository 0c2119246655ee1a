package server

import (
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"
)

// accountFuncs are this area's template functions.
var accountFuncs = template.FuncMap{}

func (s *Server) loginPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) loginSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) logoutSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) signupPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) signupSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) profilePage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) profileSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) userManagementPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) workerPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) workerSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) actionsPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) contributorsPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}
