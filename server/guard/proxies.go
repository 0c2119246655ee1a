package guard

import (
	"net/netip"
	"slices"

	"github.com/gin-gonic/gin"
)

// Proxies are the peers whose forwarding headers (X-Forwarded-For, X-Real-IP,
// X-Forwarded-Proto, X-Country-Code) Shoal believes: the reverse proxies in front of it.
// Anyone else would choose their own address, and so escape the per-address limits, or their
// own scheme and country. The zero Proxies trusts this machine's loopback addresses, the
// default; NewProxies gives any other set, the empty one included.
type Proxies struct {
	prefixes []netip.Prefix
	set      bool // false: the zero value, loopback
}

// loopback is what the zero Proxies trusts: a proxy on this machine (nginx).
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}

// NewProxies trusts the peers in prefixes (config.ParseTrustedProxies checks the setting), and
// nobody else: no prefixes trust nobody.
func NewProxies(prefixes []netip.Prefix) Proxies {
	return Proxies{prefixes: slices.Clone(prefixes), set: true}
}

func (p Proxies) list() []netip.Prefix {
	if !p.set {
		return loopback
	}
	return p.prefixes
}

// Contains reports whether a is a trusted proxy's address.
func (p Proxies) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, pr := range p.list() {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// ContainsIP is Contains of an address in text; text that is no address is no proxy.
func (p Proxies) ContainsIP(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && p.Contains(a)
}

// Strings lists the trusted prefixes, as gin.Engine.SetTrustedProxies takes them.
func (p Proxies) Strings() []string {
	l := p.list()
	out := make([]string, len(l))
	for i, pr := range l {
		out[i] = pr.String()
	}
	return out
}

// fromProxyKey marks a request whose peer is a trusted proxy (MarkFromProxy).
const fromProxyKey = "shoal.fromProxy"

// MarkFromProxy records, for the handlers after it, that the request's peer is a trusted
// proxy. The server's first middleware calls it, knowing the setting; handlers ask FromProxy.
// The mark is kept in the request's state (Start), else in its keys.
func MarkFromProxy(c *gin.Context) {
	if st := stateOf(c); st != nil {
		st.fromProxy = true
		return
	}
	c.Set(fromProxyKey, true)
}

// FromProxy reports whether the request came from a trusted proxy, whose forwarding headers
// may be believed.
func FromProxy(c *gin.Context) bool {
	if st := stateOf(c); st != nil {
		return st.fromProxy
	}
	return c.GetBool(fromProxyKey)
}
