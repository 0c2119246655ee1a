//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gitmirror

import (
	"errors"
	"os"
	"syscall"
)

// errLocked: another open file holds the lock.
var errLocked = errors.New("locked")

// lockFileAt takes an exclusive lock on the file at path without waiting for it, held until the
// file is closed (or its process ends). flock locks belong to the open file, so two opens in
// one process exclude each other as two processes do.
func lockFileAt(path string) (*os.File, error) {
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
