package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// requestTaskBody is what fishtest's worker sends to /api/request_task (reference 9.4), byte for
// byte as Python's json.dumps writes it.
const requestTaskBody = `{"worker_info": {"uname": "Linux 6.1.0-18-amd64", "architecture": ["64bit", "ELF"], ` +
	`"concurrency": 4, "max_memory": 8192, "min_threads": 1, "username": "fakeworker", "version": 325, ` +
	`"python_version": [3, 11, 2], "gcc_version": [13, 2, 0], "compiler": "g++", ` +
	`"unique_key": "ab12cd34-5a28-4b7d-b27b-d78d97ecf11a", "modified": false, "worker_arch": "x86-64-avx2", ` +
	`"ARCH": "?", "nps": 0.0, "near_github_api_limit": false}, "password": "secret"}`

// updateTaskBody is a typical /api/update_task body: a worker 200 games into its task, after
// its first bench (so ARCH and nps are filled in).
const updateTaskBody = `{"password": "secret", "run_id": "65a1b2c3d4e5f60718293a4b", "task_id": 17, ` +
	`"stats": {"wins": 52, "losses": 49, "draws": 99, "crashes": 0, "time_losses": 1, "pentanomial": [5, 20, 46, 25, 4]}, ` +
	`"worker_info": {"uname": "Linux 6.1.0-18-amd64", "architecture": ["64bit", "ELF"], "concurrency": 16, ` +
	`"max_memory": 16384, "min_threads": 1, "username": "fakeworker", "version": 325, "python_version": [3, 11, 2], ` +
	`"gcc_version": [13, 2, 0], "compiler": "g++", "unique_key": "ab12cd34-5a28-4b7d-b27b-d78d97ecf11a", ` +
	`"modified": false, "worker_arch": "x86-64-avx2", ` +
	`"ARCH": "x86-64-avx2 sse41 ssse3 sse3 popcnt avx2 bmi2 fma", "nps": 1234567.8, "near_github_api_limit": false}}`

// spsaUpdateBody is an update_task body of an SPSA run: cumulative stats plus the batch's
// results and the signature request_spsa gave.
const spsaUpdateBody = `{"password": "secret", "run_id": "65a1b2c3d4e5f60718293a4b", "task_id": 0, ` +
	`"stats": {"wins": 3, "losses": 2, "draws": 3, "crashes": 0, "time_losses": 0, "pentanomial": [0, 1, 1, 2, 0]}, ` +
	`"spsa": {"wins": 3, "losses": 2, "draws": 3, "num_games": 8, "sig": 3735928559}, ` +
	`"worker_info": {"uname": "Darwin 23.1.0", "architecture": ["64bit", ""], "concurrency": 8, ` +
	`"max_memory": 0, "min_threads": 2, "username": "Tuner42", "version": 325, "python_version": [3, 12, 0], ` +
	`"gcc_version": [15, 0, 0], "compiler": "clang++", "unique_key": "Mac1-0a1b-2c3d-4e5f-0123456789ab", ` +
	`"modified": true, "worker_arch": "apple-silicon", "ARCH": "?", "nps": 0, "near_github_api_limit": true}}`

// uploadPGNBody is an upload_pgn body: the failed-task payload plus the base64 gzip PGN.
const uploadPGNBody = `{"password": "secret", "run_id": "65a1b2c3d4e5f60718293a4b", "task_id": 3, ` +
	`"message": "", "pgn": "H4sIAAAAAAAAA8tIzcnJBwCGphA2BQAAAA==", ` +
	`"worker_info": {"uname": "Linux 6.1.0", "architecture": ["64bit", "ELF"], "concurrency": 1, ` +
	`"max_memory": 512, "min_threads": 1, "username": "fakeworker", "version": 325, "python_version": [3, 11, 2], ` +
	`"gcc_version": [13, 2, 0], "compiler": "g++", "unique_key": "ab-5a28-4b7d-b27b-d78d97ecf11a", ` +
	`"modified": false, "worker_arch": "unknown", "ARCH": "?", "nps": 0.0, "near_github_api_limit": false}}`

// object decodes a JSON object body into a generic map, for tests to edit.
func object(t testing.TB, body string) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("test body is not a JSON object: %v", err)
	}
	return m
}

// encode marshals a map edited by a test; json.RawMessage values go in verbatim.
func encode(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode test body: %v", err)
	}
	return b
}
