package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

func (s *Server) newRunPage(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) newRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) modifyRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) stopRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) approveRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) purgeRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}

func (s *Server) deleteRunSubmit(c *gin.Context) {
	s.pageError(c, http.StatusNotImplemented, "not built yet")
}
