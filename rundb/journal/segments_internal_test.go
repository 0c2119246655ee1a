package journal

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// readAll is every record of segment name, in order.
func readAll(t *testing.T, s *fileSegments, name string) [][]byte {
	t.Helper()
	var got [][]byte
	if err := s.read(context.Background(), name, func(raw []byte) error {
		got = append(got, bytes.Clone(raw))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// Batches written to a segment file read back whole and in order, across the space the file
// is allocated ahead of its writes; reading stops where the allocated space begins, and at a
// frame torn by a crash.
func TestFileSegmentsReadBackWhatWasWritten(t *testing.T) {
	s, err := newFileSegments(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	const name = segmentPrefix + "1_0"
	var want [][]byte
	written := 0
	for b := 0; written < 2*allocChunk+allocChunk/2; b++ { // past two allocations
		var batch [][]byte
		for i := range 1 + b%7 {
			rec := bytes.Repeat([]byte(fmt.Sprintf("record %d.%d;", b, i)), 1+(b*31+i)%400)
			batch = append(batch, rec)
			written += frameHeader + len(rec)
		}
		if err := s.append(time.Time{}, name, batch); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch...)
	}
	got := readAll(t, s, name)
	if len(got) != len(want) {
		t.Fatalf("read %d records back, wrote %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d reads back as %.40q..., wrote %.40q...", i, got[i], want[i])
		}
	}
	path := filepath.Join(s.dir, name)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && info.Size() <= int64(written) {
		t.Errorf("the file is %d bytes for %d written: nothing was allocated ahead", info.Size(), written)
	}

	// A crash in the middle of the last frame: everything before it reads back.
	s.close()
	last := frameHeader + len(want[len(want)-1])
	if err := os.Truncate(path, int64(written-last/2)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, name); len(got) != len(want)-1 {
		t.Errorf("after a torn last frame %d records read back, want %d", len(got), len(want)-1)
	}
}

// A segment's file is new: appending to a name a file already has would write after space
// that reading stops at, so it is refused.
func TestFileSegmentsRefuseAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	const name = segmentPrefix + "1_0"
	if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := newFileSegments(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.append(time.Time{}, name, [][]byte{[]byte("record")}); err == nil {
		t.Fatal("appended to a segment file that was already there")
	}
}

// Synced at an interval, a segment takes a batch while the syncer's fsync is in progress: the
// fsync, milliseconds on a busy disk, is not on the path of a change's reply.
func TestFileSegmentsAppendWhileSyncing(t *testing.T) {
	s, err := newFileSegments(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	syncing, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	var first sync.Once
	s.syncFile = func(f *os.File) error {
		first.Do(func() { close(syncing); <-release })
		return syncData(f)
	}
	s.startSyncer(time.Millisecond)
	const name = segmentPrefix + "1_0"
	if err := s.append(time.Time{}, name, [][]byte{[]byte("first")}); err != nil {
		t.Fatal(err)
	}
	<-syncing
	appended := make(chan error, 1)
	go func() { appended <- s.append(time.Time{}, name, [][]byte{[]byte("second")}) }()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a batch waited for the syncer's fsync")
	}
	releaseOnce()
	if got := readAll(t, s, name); len(got) != 2 || string(got[0]) != "first" || string(got[1]) != "second" {
		t.Fatalf("read back %q, want [first second]", got)
	}
}
