// Package filelock takes exclusive locks on files, so that two processes (or two parts of one)
// never work in one directory at once: the repository mirrors of server instances sharing a data
// directory, and workers sharing a directory. It imports nothing of Shoal's.
package filelock

import "errors"

// ErrLocked: another open file holds the lock.
var ErrLocked = errors.New("locked by another process or instance")
