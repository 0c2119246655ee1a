package guard

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

func TestAuthLimitClientKey(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:1":                 "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:1":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:4:5:6]:1": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:1":         "2001:db8:1:3::/64",
		"[::ffff:192.0.2.7]:1":        "192.0.2.7",
	} {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/login", nil)
		c.Request.RemoteAddr = remote
		if got := ClientKey(c); got != want {
			t.Errorf("%s: key %q, want %q", remote, got, want)
		}
	}
}

func TestUILiveLimitsClientKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"},
		{"10.1.2.3", "::ffff:10.1.2.3"},
	} {
		if ka, kb := ClientKeyOf(tc.a), ClientKeyOf(tc.b); ka != kb {
			t.Errorf("%s and %s count apart (%s, %s)", tc.a, tc.b, ka, kb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"10.1.2.3", "10.1.2.4"},
	} {
		if ClientKeyOf(tc.a) == ClientKeyOf(tc.b) {
			t.Errorf("%s and %s count as one", tc.a, tc.b)
		}
	}
}
