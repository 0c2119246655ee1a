package guard

import (
	"net/netip"
	"slices"
	"testing"
)

func TestProxies(t *testing.T) {
	var loopback Proxies
	listed := NewProxies([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")})
	none := NewProxies(nil)
	for _, c := range []struct {
		p    Proxies
		ip   string
		want bool
	}{
		{loopback, "127.0.0.1", true},
		{loopback, "::1", true},
		{loopback, "::ffff:127.0.0.1", true}, // an IPv4 peer on a dual-stack socket
		{loopback, "127.0.0.2", false},
		{loopback, "10.0.0.1", false},
		{listed, "10.200.0.1", true},
		{listed, "::ffff:10.200.0.1", true},
		{listed, "fd00::5", true},
		{listed, "fd00:0:0:1::5", false},
		{listed, "127.0.0.1", false},
		{listed, "not an address", false},
		{none, "127.0.0.1", false},
	} {
		if got := c.p.ContainsIP(c.ip); got != c.want {
			t.Errorf("%v.ContainsIP(%s) = %v, want %v", c.p.Strings(), c.ip, got, c.want)
		}
	}
	if got, want := loopback.Strings(), []string{"127.0.0.1/32", "::1/128"}; !slices.Equal(got, want) {
		t.Errorf("the zero Proxies lists %v, want %v", got, want)
	}
	if got := none.Strings(); len(got) != 0 {
		t.Errorf("no proxies list %v", got)
	}
}
