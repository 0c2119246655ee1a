package embedded

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
)

// peerFront is the embedded database's TCP address, for processes of this machine that cannot
// use its Unix socket (a secondary started with --mongo-uri mongodb://127.0.0.1:PORT/). The
// embedded database has no users and passwords, so the front admits only connections whose
// other end belongs to the same operating-system user as the server, as a Unix socket in a
// private directory does: it looks the client's socket up in /proc/net/tcp{,6}, where Linux
// names each socket's owner. Any other connection is closed before a byte is passed on.
// Safe for concurrent use.
type peerFront struct {
	ln     net.Listener
	sock   string
	uid    int
	logger *slog.Logger
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// startPeerFront listens on addr (loopback) and forwards the connections of user uid to the
// Unix socket sock.
func startPeerFront(addr, sock string, uid int, logger *slog.Logger) (*peerFront, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() {
		got := ln.Addr().String()
		ln.Close()
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, got, ErrNotLoopback)
	}
	f := &peerFront{ln: ln, sock: sock, uid: uid, logger: logger, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *peerFront) addr() string { return f.ln.Addr().String() }

func (f *peerFront) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		uid, err := peerUID(c)
		if err != nil || uid != f.uid {
			f.logger.Warn("embedded database: refused a TCP connection from another user", "remote", c.RemoteAddr().String(),
				"uid", uid, "err", err)
			_ = c.Close()
			continue
		}
		if !f.track(c, true) {
			_ = c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(c, false)
			f.forward(c)
		}()
	}
}

// track adds (or removes) a connection to close at close; adding fails once closing began.
func (f *peerFront) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, c)
		return true
	}
	if f.conns == nil {
		return false
	}
	f.conns[c] = true
	return true
}

// forward copies bytes both ways between c and the database's socket until either side ends.
func (f *peerFront) forward(c net.Conn) {
	defer c.Close()
	db, err := net.Dial("unix", f.sock)
	if err != nil {
		f.logger.Warn("embedded database: connect to its socket", "err", err)
		return
	}
	defer db.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(db, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, db); done <- struct{}{} }()
	<-done // one side ended: the deferred closes end the other copy
}

// close stops accepting, ends every forwarded connection and waits for them.
func (f *peerFront) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
}

// errNoPeer means the client's socket is not in /proc/net: not a TCP connection of this
// machine, or not Linux.
var errNoPeer = errors.New("the client's socket is not listed in /proc/net/tcp")

// peerUID returns the uid owning the other end of c, a loopback TCP connection: the socket in
// /proc/net/tcp (or tcp6) whose local address is c's remote one and whose remote address is
// c's local one.
func peerUID(c net.Conn) (int, error) {
	local, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	remote, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return -1, errNoPeer
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, err := findSocketUID(table, remote, local)
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, errNoPeer) {
			return -1, err
		}
	}
	return -1, errNoPeer
}

// findSocketUID scans one /proc/net table for the socket from local to remote.
func findSocketUID(table string, local, remote netip.AddrPort) (int, error) {
	fh, err := os.Open(table)
	if err != nil {
		if os.IsNotExist(err) {
			return -1, errNoPeer
		}
		return -1, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		l, errL := parseProcAddr(fields[1])
		r, errR := parseProcAddr(fields[2])
		if errL != nil || errR != nil || !sameEndpoint(l, local) || !sameEndpoint(r, remote) {
			continue
		}
		return strconv.Atoi(fields[7])
	}
	if err := sc.Err(); err != nil {
		return -1, err
	}
	return -1, errNoPeer
}

// sameEndpoint compares two endpoints, an IPv4 address and its IPv6-mapped form alike.
func sameEndpoint(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseProcAddr reads /proc/net/tcp's "0100007F:1F90": the address as 32-bit words in host
// (little-endian) order, then the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port in %q", s)
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", hexAddr)
	}
	for i := 0; i+4 <= len(raw); i += 4 { // each word is little-endian
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port %q", hexPort)
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
