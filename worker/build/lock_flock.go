//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package build

import (
	"errors"
	"os"
	"syscall"
)

// errLocked is a directory another worker holds.
var errLocked = errors.New("another worker uses this directory")

// lockDir takes an exclusive lock on the file at path, held until the file is closed.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}
