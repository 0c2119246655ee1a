package server

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shoal-chess/shoal/server/guard"
)

// instrument counts and times each request by route template (c.FullPath(): "/tests/view/:id",
// not the run's id, so the label stays bounded), method and status code. It sits outside the
// recovery and the shutdown guard, so panics (500) and refusals (503) are counted too.
// Streams (live pages) count once, when they end. The time runs from stamp's arrival time.
func (s *Server) instrument(c *gin.Context) {
	c.Next()
	s.deps.Metrics.ObserveHTTPRequest(c.FullPath(), c.Request.Method, c.Writer.Status(), guard.SinceStart(c))
}

// metricsHandler serves Deps.Gatherer in Prometheus's text format. A scrape is counted like any
// other request, route "/metrics", once it has been answered: each scrape shows the scrapes
// before it, never itself.
func (s *Server) metricsHandler() gin.HandlerFunc {
	if s.deps.Gatherer == nil {
		return func(c *gin.Context) { c.String(http.StatusNotFound, "metrics are not enabled on this instance\n") }
	}
	h := gin.WrapH(promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slogErrorLogger{s},
		ErrorHandling: promhttp.ContinueOnError, // a broken collector must not hide the rest
	}))
	return func(c *gin.Context) {
		if !s.mayScrape(c) {
			c.String(http.StatusNotFound, "404 page not found\n")
			return
		}
		h(c)
	}
}

// mayScrape reports whether c may read the metrics: a client on this machine that talks to
// Shoal directly (a local Prometheus; not a request nginx passes on, which carries the client's
// address), or anyone with the bearer token Deps.MetricsToken, when one is set. Everyone else
// gets the 404 of a page that does not exist: the figures (users' activity, load) are not
// public.
func (s *Server) mayScrape(c *gin.Context) bool {
	if token := s.deps.MetricsToken; token != "" {
		got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return true
		}
	}
	return guard.IsLoopback(c.RemoteIP()) && !guard.ProxyHeaders(c)
}

// slogErrorLogger passes promhttp's gathering errors to the server's logger.
type slogErrorLogger struct{ s *Server }

func (l slogErrorLogger) Println(v ...any) { l.s.logger.Error("gather metrics", "err", v) }
