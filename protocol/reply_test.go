package protocol_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

// taskReplyBody is a request_task reply in fishtest's shape, args trimmed to a few extra keys.
const taskReplyBody = `{"run": {"_id": "65a1b2c3d4e5f60718293a4b", "args": {"base_tag": "master", "new_tag": "patch",
 "base_nets": ["nn-1111111111aa.nnue"], "num_games": 60000, "tc": "10+0.1", "new_tc": "10+0.1",
 "book": "UHO_Lichess_4852_v1.epd", "book_depth": "8", "threads": 1,
 "resolved_base": "0123456789abcdef0123456789abcdef01234567", "resolved_new": "89abcdef0123456789abcdef0123456789abcdef",
 "base_options": "Hash=16", "new_options": "Hash=16 Foo=1", "base_signature": "1234567", "new_signature": "7654321",
 "tests_repo": "https://github.com/someone/Stockfish", "adjudication": false, "priority": 0.0,
 "sprt": {"alpha": 0.05, "beta": 0.05, "elo0": 0.0, "elo1": 2.0, "elo_model": "normalized", "state": "",
  "llr": 0.5, "batch_size": 8, "lower_bound": -2.9444389791664403, "upper_bound": 2.9444389791664403, "lost_samples": 0},
 "book_sri": "sha384-abc"},
 "my_task": {"num_games": 800, "start": 12000, "stats": {"wins": 0, "losses": 0, "draws": 0, "crashes": 0, "time_losses": 0, "pentanomial": [0, 0, 0, 0, 0]}}},
 "task_id": 15, "duration": 0.0123}`

func TestTaskReplyReadsFishtestShape(t *testing.T) {
	var r protocol.TaskReply
	if err := json.Unmarshal([]byte(taskReplyBody), &r); err != nil {
		t.Fatal(err)
	}
	if r.TaskWaiting != nil || r.Run == nil || r.TaskID == nil || *r.TaskID != 15 || r.Duration != 0.0123 {
		t.Fatalf("decoded %+v", r)
	}
	if r.Run.ID != "65a1b2c3d4e5f60718293a4b" || r.Run.MyTask.NumGames != 800 || r.Run.MyTask.Start != 12000 ||
		r.Run.MyTask.Stats == nil {
		t.Errorf("run %+v", r.Run)
	}
	a, err := r.Run.ParseArgs()
	if err != nil {
		t.Fatal(err)
	}
	if a.TC != "10+0.1" || a.NewTC != "10+0.1" || a.Threads != 1 || a.NumGames != 60000 || a.BookDepth != "8" ||
		a.BookSRI != "sha384-abc" || a.NewOptions != "Hash=16 Foo=1" || a.BaseSignature != "1234567" ||
		a.ResolvedNew != "89abcdef0123456789abcdef0123456789abcdef" || a.TestsRepo != "https://github.com/someone/Stockfish" {
		t.Errorf("args %+v", a)
	}
	if a.Adjudication == nil || *a.Adjudication {
		t.Errorf("adjudication %v, want present and false", a.Adjudication)
	}
	if a.SPRT == nil || a.SPRT.BatchSize != 8 || a.SPRT.Elo1 != 2 || a.SPSA != nil {
		t.Errorf("sprt %+v, spsa %+v", a.SPRT, a.SPSA)
	}

	r.Run.Args = json.RawMessage(`{"threads": "1"}`)
	if _, err := r.Run.ParseArgs(); err == nil {
		t.Error("threads as a string parsed without an error")
	}
}

// The Python worker tests for the presence of keys ("task_waiting" in req, req["task_alive"]),
// so the replies must marshal exactly the keys fishtest sends.
func TestRepliesMarshalFishtestKeys(t *testing.T) {
	no := false
	taskID := 0
	for _, c := range []struct {
		name  string
		reply any
		want  string
	}{
		{"no task", protocol.TaskReply{TaskWaiting: &no, Duration: 0.5}, `{"task_waiting":false,"duration":0.5}`},
		{"no task, busy", protocol.TaskReply{TaskWaiting: &no, Info: "busy", Duration: 1}, `{"task_waiting":false,"info":"busy","duration":1}`},
		{"task zero", protocol.TaskReply{Run: &protocol.TaskRun{ID: "r", Args: json.RawMessage(`{}`), MyTask: protocol.MyTask{NumGames: 2}}, TaskID: &taskID},
			`{"run":{"_id":"r","args":{},"my_task":{"num_games":2,"start":0}},"task_id":0,"duration":0}`},
		{"a dead task", protocol.UpdateReply{TaskAlive: false, Duration: 2}, `{"task_alive":false,"duration":2}`},
		{"version", protocol.VersionReply{Version: protocol.Version, Duration: 0.25}, `{"version":325,"duration":0.25}`},
		{"an error", protocol.ErrorReply{Error: "/api/beat: Invalid run_id: x", Duration: 0}, `{"error":"/api/beat: Invalid run_id: x","duration":0}`},
		{"spsa, inactive task", protocol.SPSAReply{Info: "not active", Duration: 0}, `{"task_alive":false,"info":"not active","duration":0}`},
		{"spsa, active task", protocol.SPSAReply{
			WParams: []protocol.SPSAWParam{{Name: "A", Value: 1.5, C: 2, R: 0.1, Flip: -1}},
			BParams: []protocol.SPSABParam{{Name: "A", Value: 3.5}}, Sig: 7, TaskAlive: true},
			`{"w_params":[{"name":"A","value":1.5,"c":2,"R":0.1,"flip":-1}],"b_params":[{"name":"A","value":3.5}],"sig":7,"task_alive":true,"duration":0}`},
		{"spsa, active task without params", protocol.SPSAReply{WParams: []protocol.SPSAWParam{}, BParams: []protocol.SPSABParam{}, TaskAlive: true},
			`{"w_params":[],"b_params":[],"task_alive":true,"duration":0}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(c.reply)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("marshalled %s\nwant        %s", got, c.want)
			}
			back := reflect.New(reflect.TypeOf(c.reply))
			if err := json.Unmarshal(got, back.Interface()); err != nil || !reflect.DeepEqual(back.Elem().Interface(), c.reply) {
				t.Errorf("unmarshalled back to %+v, %v", back.Elem().Interface(), err)
			}
		})
	}
}
