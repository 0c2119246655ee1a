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

// DecodeAccess alone: the credentials of a call.
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

// What the server does with each worker call's body: one check that it is JSON, which also
// finds the members, then the credentials, then the whole request, into a reused buffer.
// Against DecodeAccess plus DecodeRequest, it saves checking the body twice and walking it
// three times more.
func BenchmarkWorkerCallBody(b *testing.B) {
	body := []byte(updateTaskBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	buf := new(protocol.RequestBuffer)
	for b.Loop() {
		p, err := protocol.ParseBodyInto(buf, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Access(); err != nil {
			b.Fatal(err)
		}
		if _, err := p.RequestInto(buf, legacy); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorkerCallBody as it was: ParseBody, whose Access and Request each find the
// members again.
func BenchmarkWorkerCallBodyUnindexed(b *testing.B) {
	body := []byte(updateTaskBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	buf := new(protocol.RequestBuffer)
	for b.Loop() {
		p, err := protocol.ParseBody(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Access(); err != nil {
			b.Fatal(err)
		}
		if _, err := p.RequestInto(buf, legacy); err != nil {
			b.Fatal(err)
		}
	}
}
