package journal

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate allocates n bytes of f from off, extending its size; an error (a file system
// without fallocate, say) leaves f as it was, and the writes then extend it themselves.
func preallocate(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), 0, off, n)
}

// syncData makes f's data durable, and of its metadata only what reading the data needs. It
// holds the file open while it syncs: the journal's syncer may sync a file that a rotation
// closes meanwhile.
func syncData(f *os.File) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := conn.Control(func(fd uintptr) {
		for err = unix.Fdatasync(int(fd)); err == unix.EINTR; err = unix.Fdatasync(int(fd)) {
		}
	}); cerr != nil {
		return cerr
	}
	return err
}
