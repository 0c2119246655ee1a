package protocol_test

import (
	"encoding/json"

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

// taskArgs are a run's args as request_task hands them out: an SPRT run's, with a book.
var taskArgs = []byte(`{"base_tag":"master","new_tag":"patch","num_games":60000,"tc":"10+0.1","new_tc":"10+0.1",` +
	`"threads":1,"book":"UHO_Lichess_4852_v1.epd","book_depth":"8","book_sri":"sha384-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV",` +
	`"base_options":"Hash=16 Use NNUE=true","new_options":"Hash=16 Use NNUE=true",` +
	`"resolved_base":"0123456789abcdef0123456789abcdef01234567","resolved_new":"89abcdef0123456789abcdef0123456789abcdef",` +
	`"msg_base":"Simplify away a term","msg_new":"Tweak the history bonus & malus","base_signature":"2962372",` +
	`"new_signature":"2962372","tests_repo":"https://github.com/official-stockfish/Stockfish","adjudication":true,` +
	`"sprt":{"alpha":0.05,"beta":0.05,"elo0":0,"elo1":2,"elo_model":"normalized","state":"","llr":0.53,"batch_size":8,` +
	`"lower_bound":-2.94,"upper_bound":2.94}}`)

// request_task's reply that hands out a task, written by its own AppendJSON.
func BenchmarkTaskReplyAppend(b *testing.B) {
	id := 17
	r := protocol.TaskReply{Run: &protocol.TaskRun{ID: "65a1b2c3d4e5f60718293a4b", Args: taskArgs,
		MyTask: protocol.MyTask{NumGames: 800, Start: 13600, Stats: &protocol.Stats{}}}, TaskID: &id, Duration: 0.0012}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.AppendJSON(buf[:0]); !ok {
			b.Fatal("refused")
		}
	}
}

// The same reply by encoding/json, as gin's c.JSON writes it.
func BenchmarkTaskReplyMarshal(b *testing.B) {
	id := 17
	r := protocol.TaskReply{Run: &protocol.TaskRun{ID: "65a1b2c3d4e5f60718293a4b", Args: taskArgs,
		MyTask: protocol.MyTask{NumGames: 800, Start: 13600, Stats: &protocol.Stats{}}}, TaskID: &id, Duration: 0.0012}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(&r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorkerCallBody with the keys of each object in another order than the schema's
// (sorted, as encoding/json writes a map's), as a client may send them.
func BenchmarkWorkerCallBodySortedKeys(b *testing.B) {
	body := encode(b, object(b, updateTaskBody))
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
