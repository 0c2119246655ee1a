package protocol_test

import (
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// update_task is the busiest worker call: every worker sends one per batch of games.
func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(updateTaskBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := protocol.DecodeRequest(body, legacy); err != nil {
			b.Fatal(err)
		}
	}
}

// DecodeAccess runs before DecodeRequest on every call.
func BenchmarkDecodeAccess(b *testing.B) {
	body := []byte(updateTaskBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := protocol.DecodeAccess(body); err != nil {
			b.Fatal(err)
		}
	}
}
