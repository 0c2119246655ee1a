package guard

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// A request's keys live in a map that the next request reuses once Done has run: nothing one
// request set, a mark or a value, may be seen by the requests after it, however many reuse it.
func TestRequestStateIsNotInheritedByTheNextRequest(t *testing.T) {
	newContext := func(addr string) *gin.Context {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/api/beat", nil)
		c.Request.RemoteAddr = addr + ":1234"
		return c
	}
	for i := range 100 {
		first := newContext("192.0.2.1")
		Start(first)
		ExpectRefusal(first)
		MarkFromProxy(first)
		first.Set("shoal.scheduler", i)
		if !RefusalExpected(first) || !FromProxy(first) || SinceStart(first) <= 0 || ClientIP(first) != "192.0.2.1" {
			t.Fatalf("request %d: its own marks are not seen", i)
		}
		Done(first)
		if first.Keys != nil {
			t.Fatalf("request %d: still holds its keys after Done: %v", i, first.Keys)
		}

		next := newContext("198.51.100.2")
		Start(next)
		if RefusalExpected(next) || FromProxy(next) {
			t.Fatalf("request %d: the next request inherits its marks", i)
		}
		if ip := ClientIP(next); ip != "198.51.100.2" {
			t.Fatalf("request %d: the next request's client is %s, its predecessor's", i, ip)
		}
		if _, ok := next.Get("shoal.scheduler"); ok {
			t.Fatalf("request %d: the next request inherits its keys: %v", i, next.Keys)
		}
		Done(next)
	}
}

// A request that Start did not see has no duration, and Done leaves it alone.
func TestRequestStateWithoutStart(t *testing.T) {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Set("other", 1)
	if d := SinceStart(c); d != 0 {
		t.Errorf("SinceStart without Start = %v", d)
	}
	Done(c)
	if _, ok := c.Get("other"); !ok {
		t.Error("Done without Start dropped the request's keys")
	}
}
