package server

import (
	"net"
	"net/netip"
	"sync"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/server/guard"
)

// ConnLimits bounds the connections a listener keeps open, so that one client cannot take every
// file descriptor of the process (and with them the database's and the log's).
type ConnLimits struct {
	// PerAddress is how many connections one client address may hold open at once; 0 means no
	// limit. IPv6 clients count per /64, the block one host is usually given.
	PerAddress int
	// Total is how many connections may be open at once in all; 0 means no limit.
	Total int
	// Exempt are the addresses not limited per address: the trusted proxies, whose connections
	// carry every client and which limit their clients themselves (configs/nginx.conf). They
	// still count towards Total. The zero value exempts loopback, as guard.Proxies trusts it.
	Exempt guard.Proxies
	// Metrics counts open and refused connections; nil counts nothing.
	Metrics *metrics.Metrics
}

// LimitListener returns ln with the limits applied: a connection over a limit is accepted and
// closed at once, so that the client hears a reset instead of waiting in the kernel's backlog,
// and the listener keeps accepting everybody else.
func LimitListener(ln net.Listener, l ConnLimits) net.Listener {
	return &limitListener{Listener: ln, limits: l, open: make(map[netip.Addr]int)}
}

// limitListener is safe for concurrent use: mu guards open and total.
type limitListener struct {
	net.Listener
	limits ConnLimits

	mu    sync.Mutex
	open  map[netip.Addr]int // per client key, only for addresses that are limited
	total int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, limited := l.clientKey(c.RemoteAddr())
		if reason := l.admit(key, limited); reason != "" {
			l.limits.Metrics.ConnectionRefused(reason)
			_ = c.Close()
			continue
		}
		l.limits.Metrics.ConnectionOpened()
		return &limitedConn{Conn: c, release: func() { l.release(key, limited) }}, nil
	}
}

// clientKey is the address a connection counts against, and whether it is limited per address.
func (l *limitListener) clientKey(addr net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}, false // not an IP connection (a Unix socket): nobody to tell apart
	}
	a := ap.Addr().Unmap()
	if l.limits.PerAddress <= 0 || l.limits.Exempt.Contains(a) {
		return a, false
	}
	if a.Is6() {
		a = netip.PrefixFrom(a, 64).Masked().Addr()
	}
	return a, true
}

// admit counts a new connection in, or says which limit refuses it.
func (l *limitListener) admit(key netip.Addr, limited bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.Total > 0 && l.total >= l.limits.Total {
		return "total"
	}
	if limited && l.open[key] >= l.limits.PerAddress {
		return "per_address"
	}
	l.total++
	if limited {
		l.open[key]++
	}
	return ""
}

func (l *limitListener) release(key netip.Addr, limited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if limited {
		if l.open[key]--; l.open[key] <= 0 {
			delete(l.open, key)
		}
	}
	l.limits.Metrics.ConnectionClosed()
}

// limitedConn gives its place back once, at its first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
