package fleet

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
)

func TestSpoiledUpdatesAreRefusedByTheServersValidation(t *testing.T) {
	runID, taskID := "0123456789abcdef01234567", 3
	wi := protocol.WorkerInfo{Uname: "Linux", Architecture: [2]string{"64bit", "ELF"}, Concurrency: 1,
		MaxMemory: 840, MinThreads: 1, Username: "fleet", Version: protocol.Version, PythonVersion: [3]int{3, 12, 0},
		GCCVersion: [3]int{13, 2, 0}, Compiler: "g++", UniqueKey: "fl000001-5a28-4b7d-b27b-d78d97ecf11a",
		WorkerArch: "x86-64-avx2", ARCH: "?"}
	for _, st := range []protocol.Stats{
		{Wins: 10, Losses: 8, Draws: 14, Pentanomial: [5]int{1, 2, 8, 4, 1}},
		{Wins: 0, Losses: 0, Draws: 32, Pentanomial: [5]int{0, 0, 16, 0, 0}},
		{Wins: 32, Pentanomial: [5]int{0, 0, 0, 0, 16}},
	} {
		body, _ := json.Marshal(protocol.Request{Password: "pw", WorkerInfo: wi, RunID: &runID, TaskID: &taskID, Stats: &st})
		if _, err := protocol.DecodeRequest(body, nil); err != nil {
			t.Fatalf("the unspoiled update %+v is refused: %v", st, err)
		}
		for kind := range 2 {
			spoiled, ok := spoilUpdate(body, kind)
			if !ok {
				t.Fatalf("kind %d could not spoil %+v", kind, st)
			}
			_, err := protocol.DecodeRequest(spoiled, nil)
			var ve *protocol.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("kind %d spoiled %+v into %s, which the server accepts (err %v)", kind, st, spoiled, err)
			}
		}
	}
	if _, ok := spoilUpdate([]byte(`{"password":"pw"}`), 0); ok {
		t.Error("a body without stats was spoiled")
	}
}

func TestErrorKindGroupsTheSameRefusal(t *testing.T) {
	a := errorKind(`Request_task: There is already a worker running with name "fleet-1cores-fl000001-5a28" which 3 seconds ago sent an update for task 0123456789abcdef01234567/12 (my name is "fleet-1cores-fl000001-9c1d")`)
	b := errorKind(`Request_task: There is already a worker running with name "fleet-1cores-fl000777-1111" which 45 seconds ago sent an update for task 89abcdef0123456789abcdef/3 (my name is "fleet-1cores-fl000777-2222")`)
	if a != b {
		t.Errorf("two duplicate-worker refusals count as different kinds:\n%s\n%s", a, b)
	}
	if errorKind("Update_task: task 0123456789abcdef01234567/12 is not active") == a {
		t.Error("different refusals count as one kind")
	}
}
