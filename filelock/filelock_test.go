//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestTryLockExcludesUntilClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	first, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second lock while the first is held: %v; want ErrLocked", err)
	}
	first.Close()
	second, err := TryLock(path)
	if err != nil {
		t.Fatalf("the lock after the first was closed: %v", err)
	}
	second.Close()
}
