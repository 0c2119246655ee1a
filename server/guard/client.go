package guard

import (
	"net/netip"

	"github.com/gin-gonic/gin"
)

// IsLoopback reports whether ip is this machine's address.
func IsLoopback(ip string) bool { return ip == "127.0.0.1" || ip == "::1" }

// ProxyHeaders reports whether the request carries the client headers a proxy adds (nginx sets
// both); with a loopback peer, it came through the local proxy.
func ProxyHeaders(c *gin.Context) bool {
	return c.GetHeader("X-Forwarded-For") != "" || c.GetHeader("X-Real-IP") != ""
}

// ClientKey is the address a client's attempts count against: ClientKeyOf its IP address.
func ClientKey(c *gin.Context) string { return ClientKeyOf(ClientIP(c)) }

// ClientKeyOf is the address a client at ip is counted under, by the login limits, the live
// streams and the request_task limits alike: an IPv4 address (also one mapped into IPv6), or
// the /64 network of an IPv6 one, as one host or site usually has all of one. A string that is
// no address is its own key.
func ClientKeyOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if !a.Is6() {
		return a.String()
	}
	p, err := a.WithZone("").Prefix(ipv6LimitPrefixBits)
	if err != nil {
		return ip
	}
	return p.String()
}
