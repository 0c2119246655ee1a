package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrForbiddenAddress means a webhook's name resolved to an address that webhooks may not reach:
// this machine, a private network, a link-local or multicast address.
var ErrForbiddenAddress = errors.New("webhook target refused: not a public address")

// forbidden are the networks refused besides those netip classifies (loopback, private,
// link-local, multicast, unspecified): "this network", carrier-grade NAT, the IETF's and the
// benchmarking ranges, the reserved and broadcast block, and NAT64's mapping of IPv4 (whose
// IPv4 address could be any of the above).
var forbidden = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// Policy decides which addresses a webhook may be dialled at. The zero Policy allows only public
// addresses; Allow lists networks the operator lets webhooks reach besides (a chat server on
// the local network, a test's receiver on loopback). Safe for concurrent use once built.
type Policy struct {
	Allow []netip.Prefix
}

// Permits reports whether a webhook may connect to addr.
func (p Policy) Permits(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, n := range p.Allow {
		if n.Contains(addr) {
			return true
		}
	}
	if addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() || !addr.IsValid() {
		return false
	}
	if addr.Is4() && addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return false
	}
	for _, n := range forbidden {
		if n.Contains(addr) {
			return false
		}
	}
	return true
}

// control is a net.Dialer's Control: it runs after the name is resolved and the socket made,
// before connect, on the very address about to be dialled, so a name that resolves to a private
// address (or changes its answer between a check and the dial) is refused before any packet is
// sent to it. seen, if set, is told of each decision (tests).
func (p Policy) control(seen func(address string, err error)) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		err := p.check(network, address)
		if seen != nil {
			seen(address, err)
		}
		return err
	}
}

// check refuses an address the policy does not permit, and any network but TCP.
func (p Policy) check(network, address string) error {
	if network != "tcp4" && network != "tcp6" && network != "tcp" {
		return fmt.Errorf("%w: network %s", ErrForbiddenAddress, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
	}
	if !p.Permits(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, ap.Addr())
	}
	return nil
}

// maxResponse is how much of a webhook's reply is read (and thrown away) before closing it.
const maxResponse = 64 << 10

// webhookClient is the HTTP client webhooks are posted with: every connection checked by the
// policy, no proxy (which would dial for us, unchecked), no redirect followed (a redirect to a
// private address would otherwise be followed), and an overall timeout.
func webhookClient(p Policy, timeout time.Duration, seen func(string, error)) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, Control: p.control(seen)}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConns:          8,
			IdleConnTimeout:       30 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
