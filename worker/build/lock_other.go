//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package build

import "os"

// lockDir opens the lock file; this system gets no lock, so two workers must not share a
// directory.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
}
