//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gitmirror

import (
	"errors"
	"os"
)

// errLocked: another open file holds the lock; never, here.
var errLocked = errors.New("locked")

// lockFileAt opens the lock file; this system gets no lock, so two Mirrors must not share a
// Dir.
func lockFileAt(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}
