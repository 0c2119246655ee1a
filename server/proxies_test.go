package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/guard"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// trusted_proxies decides whose forwarding headers count: a proxy on another host, once listed,
// says who its clients are; loopback, once not listed, says nothing; anyone else never does.
// Without the setting, a proxy on this machine is trusted.
func TestTrustedProxiesDecideWhoTheClientIs(t *testing.T) {
	serve := func(proxies guard.Proxies) http.Handler {
		s, err := New(Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
			TrustedProxies: proxies})
		if err != nil {
			t.Fatal(err)
		}
		s.engine.GET("/client", func(c *gin.Context) {
			c.JSON(http.StatusOK, gin.H{"ip": c.ClientIP(), "proxy": guard.FromProxy(c)})
		})
		return s.Handler()
	}
	ask := func(h http.Handler, peer string) (ip string, proxy bool) {
		req := httptest.NewRequest(http.MethodGet, "/client", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var out struct {
			IP    string `json:"ip"`
			Proxy bool   `json:"proxy"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("GET /client from %s = %d %s", peer, w.Code, w.Body)
		}
		return out.IP, out.Proxy
	}
	remote := serve(guard.NewProxies([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}))
	byDefault := serve(guard.Proxies{})
	for _, c := range []struct {
		name      string
		h         http.Handler
		peer      string
		wantIP    string
		wantProxy bool
	}{
		{"a listed proxy on another host", remote, "10.1.2.3:5000", "203.0.113.7", true},
		{"loopback, not listed", remote, "127.0.0.1:5000", "127.0.0.1", false},
		{"a client directly", remote, "198.51.100.9:5000", "198.51.100.9", false},
		{"the default's local proxy", byDefault, "127.0.0.1:5000", "203.0.113.7", true},
		{"the default's local proxy over IPv6", byDefault, "[::1]:5000", "203.0.113.7", true},
		{"a host the default does not trust", byDefault, "10.1.2.3:5000", "10.1.2.3", false},
	} {
		ip, proxy := ask(c.h, c.peer)
		if ip != c.wantIP || proxy != c.wantProxy {
			t.Errorf("%s (%s): client %s, from a trusted proxy %v; want %s, %v", c.name, c.peer, ip, proxy, c.wantIP, c.wantProxy)
		}
	}
}
