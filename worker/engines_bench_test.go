package worker

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/worker/match"
)

// cpuTimes is the CPU time of this process and of its waited-for children (the engines).
func cpuTimes(b *testing.B) (self, children time.Duration) {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return self, time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStockfishGames plays game pairs between Debian's Stockfish at 10+0.1 (unscaled, two at
// once) and reports the worker's own CPU per move and per game beside the engines':
//
//	go test -run xxx -bench StockfishGames -benchtime 2x ./worker/
func BenchmarkStockfishGames(b *testing.B) {
	sf := ""
	for _, p := range []string{"/usr/games/stockfish"} {
		if _, err := os.Stat(p); err == nil {
			sf = p
		}
	}
	if sf == "" {
		b.Skip("no Stockfish (Debian: apt-get install stockfish)")
	}
	task := realTask()
	task.Args.NewOptions, task.Args.BaseOptions = "Hash=16", "Hash=16"
	src := &EngineSource{Engine: sf, Factor: 1, Concurrency: 2}
	selfBefore, childrenBefore := cpuTimes(b)
	games, moves := 0, 0
	for b.Loop() {
		batch, err := src.Play(context.Background(), task, 2, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, pgn := range match.SplitPGN(batch.PGN) {
			g, err := match.ParsePGN(pgn)
			if err != nil {
				b.Fatal(err)
			}
			games++
			moves += len(g.Moves())
		}
		task.Start += 4
	}
	selfAfter, childrenAfter := cpuTimes(b)
	worker, engines := selfAfter-selfBefore, childrenAfter-childrenBefore
	b.ReportMetric(float64(worker.Microseconds())/float64(moves), "worker-µs/move")
	b.ReportMetric(float64(engines.Microseconds())/float64(moves), "engines-µs/move")
	b.ReportMetric(float64(worker.Milliseconds())/float64(games), "worker-ms/game")
	b.ReportMetric(float64(engines.Milliseconds())/float64(games), "engines-ms/game")
	b.ReportMetric(100*worker.Seconds()/engines.Seconds(), "worker-%-of-engines")
	b.ReportMetric(float64(moves)/float64(games), "moves/game")
}
