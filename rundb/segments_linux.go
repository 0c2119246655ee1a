package rundb

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate allocates n bytes of f from off, extending its size; an error (a file system
// without fallocate, say) leaves f as it was, and the writes then extend it themselves.
func preallocate(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), 0, off, n)
}

// syncData makes f's data durable, and of its metadata only what reading the data needs.
func syncData(f *os.File) error {
	for {
		if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}
