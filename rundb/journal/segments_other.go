//go:build !linux

package journal

import (
	"errors"
	"os"
)

// preallocate is Linux's alone: elsewhere the writes extend the file.
func preallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }

// syncData makes f durable.
func syncData(f *os.File) error { return f.Sync() }
