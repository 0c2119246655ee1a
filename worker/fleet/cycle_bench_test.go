package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// stubChild is the argument that makes this test binary the stub server of BenchmarkFleetCycle.
const stubChild = "fleet-bench-stub"

// stubTaskGames is the size of a stub task: six updates of four games (SPRT batches of 2 pairs).
const stubTaskGames = 24

// serveStub answers the worker protocol with fixed replies, as fast as net/http can, until its
// standard input closes: the server of BenchmarkFleetCycle, in a process of its own so that
// the benchmark's CPU is the fleet's alone. It prints its address first.
func serveStub() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var taskID, calls atomic.Int64
	args := `{"base_tag":"master","new_tag":"patch","num_games":400000,"tc":"10+0.1","threads":1,` +
		`"book":"UHO_Lichess_4852_v1.epd","book_depth":"8","base_options":"Hash=16","new_options":"Hash=16",` +
		`"resolved_base":"` + strings.Repeat("b", 40) + `","resolved_new":"` + strings.Repeat("a", 40) + `",` +
		`"base_signature":"123","new_signature":"456","tests_repo":"https://github.com/official-stockfish/Stockfish",` +
		`"sprt":{"alpha":0.05,"beta":0.05,"elo0":0,"elo1":2,"elo_model":"normalized","state":"","llr":0,"batch_size":2}}`
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/stub/calls" {
			_, _ = io.WriteString(w, strconv.FormatInt(calls.Load(), 10))
			return
		}
		calls.Add(1)
		var reply string
		switch strings.TrimPrefix(r.URL.Path, "/api/") {
		case "request_version":
			reply = `{"version":` + strconv.Itoa(protocol.Version) + `,"duration":0.0003}`
		case "request_task":
			reply = `{"run":{"_id":"0123456789abcdef01234567","args":` + args + `,"my_task":{"num_games":` +
				strconv.Itoa(stubTaskGames) + `,"start":0,"stats":{"wins":0,"losses":0,"draws":0,"crashes":0,` +
				`"time_losses":0,"pentanomial":[0,0,0,0,0]}}},"task_id":` + strconv.FormatInt(taskID.Add(1), 10) +
				`,"duration":0.0012}`
		case "update_task", "beat":
			reply = `{"task_alive":true,"duration":0.0004}`
		default:
			reply = `{"duration":0.0005}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	})
	go func() { _ = http.Serve(l, h) }()
	fmt.Println(l.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// startStub starts serveStub in a child process and returns its URL.
func startStub(b *testing.B) string {
	cmd := exec.Command(os.Args[0], stubChild)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return "http://" + strings.TrimSpace(addr)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stubCalls is how many worker calls the stub at url has answered.
func stubCalls(b *testing.B, url string) int64 {
	resp, err := http.Get(url + "/stub/calls")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	n, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkFleetCycle runs a fleet of simulated workers against a stub server in another
// process, each worker in the whole protocol cycle (request_version, request_task, an update
// every two pair times, upload_pgn every 24 games), and reports the fleet process's CPU per
// request: what a fleet costs its machine, apart from the server's cost.
//
// small: 300 workers calling often (an update every 200 ms, a beat between), their start and
// stop included. shard: a quarter of the bench's capacity fleet, 2,500 workers at time scale
// 50 (a beat before most updates, a task every 15 s), measured over 20 s once they have all
// started, their first tasks ending in it. FLEET_BENCH_SHARD_WORKERS sets the shard's workers
// instead (the same time scale): 10,000 is the capacity fleet in one process, 5,000 half of it,
// to weigh a process's cost per request against the number of processes the fleet is split over.
func BenchmarkFleetCycle(b *testing.B) {
	shardWorkers := 2500
	if s := os.Getenv("FLEET_BENCH_SHARD_WORKERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("FLEET_BENCH_SHARD_WORKERS=%q: want a positive number", s)
		}
		shardWorkers = n
	}
	url := startStub(b)
	b.Run("small", func(b *testing.B) {
		var requests int64
		var cpu time.Duration
		for b.Loop() {
			opts := Options{ServerURL: url, Username: "bench", Password: "secret", Workers: 300,
				TimeScale: 1000, PairTime: 100 * time.Millisecond, Duration: 2 * time.Second,
				StopGrace: time.Second, Seed: 1}
			before := cpuTime()
			rep, err := Run(context.Background(), opts)
			if err != nil {
				b.Fatal(err)
			}
			cpu += cpuTime() - before
			requests += rep.Requests
			checkReport(b, rep)
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(requests), "cpu-ns/req")
		b.ReportMetric(float64(requests)/float64(b.N), "req/op")
	})
	b.Run("shard", func(b *testing.B) {
		const warmUp, window = 10 * time.Second, 20 * time.Second
		var requests int64
		var cpu time.Duration
		for b.Loop() {
			opts := Options{ServerURL: url, Username: "bench", Password: "secret", Workers: shardWorkers,
				TimeScale: 50, Duration: warmUp + window + time.Second, StopGrace: time.Second, Seed: 1}
			done := make(chan *Report, 1)
			go func() {
				rep, err := Run(context.Background(), opts)
				if err != nil {
					b.Error(err)
				}
				done <- rep
			}()
			time.Sleep(warmUp)
			calls0, cpu0 := stubCalls(b, url), cpuTime()
			time.Sleep(window)
			requests += stubCalls(b, url) - calls0
			cpu += cpuTime() - cpu0
			if rep := <-done; rep != nil {
				checkReport(b, rep)
			}
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(requests), "cpu-ns/req")
		b.ReportMetric(float64(requests)/float64(b.N), "req/op")
	})
}

func checkReport(b *testing.B, rep *Report) {
	if rep.TransportErrors > 0 || len(rep.HTTPErrors) > 0 || rep.BadReplies > 0 {
		b.Fatalf("errors: %d transport (%v), http %v, %d bad replies", rep.TransportErrors,
			rep.TransportErrorSamples, rep.HTTPErrors, rep.BadReplies)
	}
}
