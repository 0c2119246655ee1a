package rundbtest

import (
	"math"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// at returns a UTC time with millisecond precision, what BSON datetimes keep.
func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC().Truncate(time.Millisecond)
}

func intp(i int) *int           { return &i }
func floatp(f float64) *float64 { return &f }

// SampleWorkerInfo is a worker's report with every field filled in.
func SampleWorkerInfo() rundb.WorkerInfo {
	return rundb.WorkerInfo{
		Uname: "Linux 6.1.0", Architecture: []string{"64bit", "ELF"}, Concurrency: 8, MaxMemory: 8192,
		MinThreads: 1, Username: "alice", Version: 325, PythonVersion: []int{3, 11, 2},
		GCCVersion: []int{12, 2, 0}, Compiler: "g++", UniqueKey: "ab12cd34-5a28-4b7d-b27b-d78d97ecf11a",
		WorkerArch: "x86-64-avx2", ARCH: "?", NPS: 1.25e6, RemoteAddr: "192.0.2.7", CountryCode: "DE",
	}
}

// SampleRun has every part of fishtest's run shape filled in: tasks, bad_tasks, SPRT state and
// SPSA parameters (a real run has one of the two; the shape allows testing both at once).
func SampleRun() *rundb.Run {
	wi := SampleWorkerInfo()
	return &rundb.Run{
		Version: rundb.RunVersion, StartTime: at("2026-11-01T10:00:00.123Z"), LastUpdated: at("2026-11-01T11:30:00Z"),
		TCBase: 10, Approved: true, Approver: "bob", Failures: 0,
		Workers: 1, Cores: 8, CommittedGames: 480, TotalGames: 960,
		Results: rundb.Results{Wins: 100, Losses: 90, Draws: 290, Crashes: 1, TimeLosses: 2, Pentanomial: []int{3, 50, 120, 60, 7}},
		NPS:     1e7, GamesPerMinute: 120.5,
		Args: rundb.RunArgs{
			BaseTag: "master", NewTag: "patch", ResolvedBase: "0123456789abcdef0123456789abcdef01234567",
			ResolvedNew: "89abcdef0123456789abcdef0123456789abcdef", MsgBase: "base", MsgNew: "new",
			BaseNets: []string{"nn-0123456789ab.nnue"}, NewNets: []string{"nn-0123456789ab.nnue"},
			NumGames: 800000, TC: "10+0.1", NewTC: "10+0.1", Threads: 1, Book: "UHO_Lichess_4852_v1.epd",
			BookDepth: "8", BaseOptions: "Hash=16", NewOptions: "Hash=16", Info: "a patch", Username: "alice",
			BaseSignature: "123456", NewSignature: "123457", TestsRepo: "https://github.com/alice/Stockfish",
			Throughput: 100, ITP: 100, Priority: 0, AutoPurge: true, ArchFilter: "avx2", Compiler: "g++",
			SPRT: &rundb.SPRT{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, EloModel: "normalized", LLR: 1.5,
				BatchSize: 16, LowerBound: math.Log(0.05 / 0.95), UpperBound: math.Log(0.95 / 0.05),
				Overshoot: &rundb.Overshoot{LastUpdate: 240, Ref0: -0.5, M0: 0.1, Sq0: 0.01, Ref1: 1.5, M1: 0.2, Sq1: 0.04}},
			SPSA: &rundb.SPSA{A: 5000, Alpha: 0.602, Gamma: 0.101, RawParams: "Foo,100,0,200,10,0.0020", Iter: 4,
				NumIter: 50000, Params: []rundb.SPSAParam{{Name: "Foo", Start: 100, Min: 0, Max: 200, CEnd: 10,
					REnd: 0.002, C: 29.8, AEnd: 0.2, A: 140.5, Theta: 101.25}},
				ParamHistory: rundb.ParamHistory{{{Theta: 100.5, R: 0.002, C: 12}}}},
		},
		Tasks: []rundb.Task{
			{NumGames: 480, Active: false, LastUpdated: at("2026-11-01T11:00:00Z"), Start: 0, Bad: true,
				Stats: rundb.NewResults(), WorkerInfo: wi},
			{NumGames: 480, Active: true, LastUpdated: at("2026-11-01T11:30:00Z"), Start: 480,
				Stats:      rundb.Results{Wins: 100, Losses: 90, Draws: 290, Crashes: 1, TimeLosses: 2, Pentanomial: []int{3, 50, 120, 60, 7}},
				WorkerInfo: wi, SPSAParams: &rundb.SPSAParams{Iter: 4, PackedFlips: []byte{0x80}}},
		},
		BadTasks: []rundb.Task{
			{NumGames: 480, LastUpdated: at("2026-11-01T11:00:00Z"), Start: 0, Bad: true, TaskID: intp(0),
				Residual: floatp(math.Inf(1)), ResidualColor: "red",
				Stats:      rundb.Results{Wins: 300, Losses: 0, Draws: 180, Pentanomial: []int{0, 0, 90, 0, 150}},
				WorkerInfo: wi},
		},
	}
}

// SampleRunWithTasks is SampleRun, unfinished and with an ID of its own, holding n copies of its
// second task told apart by their start, last update and wins: the shape whose whole document
// the run cache rewrites on every flush, at a size of the caller's choosing.
func SampleRunWithTasks(n int) *rundb.Run {
	r := SampleRun()
	r.ID = rundb.NewObjectID()
	r.Finished = false
	proto := r.Tasks[1]
	r.Tasks = make([]rundb.Task, n)
	for i := range r.Tasks {
		t := proto
		t.Start = i * t.NumGames
		t.LastUpdated = proto.LastUpdated.Add(time.Duration(i) * time.Second)
		t.Stats.Pentanomial = append([]int(nil), proto.Stats.Pentanomial...)
		t.Stats.Wins += i
		r.Tasks[i] = t
	}
	return r
}
