package embedded

import "log/slog"

// SocketName is the embedded database's Unix socket, in the data directory's db.
const SocketName = socketName

// StartFrontFor starts a TCP front on addr to the socket sock that admits only processes of the
// user uid, and returns its address and how to close it.
func StartFrontFor(addr, sock string, uid int, logger *slog.Logger) (string, func(), error) {
	f, err := startPeerFront(addr, sock, uid, logger)
	if err != nil {
		return "", nil, err
	}
	return f.addr(), f.close, nil
}
