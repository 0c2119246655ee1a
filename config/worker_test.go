package config

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadWorker(t *testing.T, env map[string]string, args ...string) (Worker, error) {
	t.Helper()
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return LoadWorker(fs, args, mapEnv(env))
}

func TestWorkerSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "worker.toml", `
server = "http://file.example:8000"
username = "fileuser"
password = "filepass"
concurrency = 2
sim_elo = 1.5
sim_pair_time = "250ms"
uuid_prefix = "file"
`)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(*Worker)
	}{
		{"the file over defaults", map[string]string{workerConfigEnv: file}, nil, func(s *Worker) {}},
		{"the environment over the file", map[string]string{workerConfigEnv: file, "SHOAL_CONCURRENCY": "5", "SHOAL_PASSWORD": "envpass"},
			nil, func(s *Worker) { s.Concurrency, s.Password = 5, "envpass" }},
		{"flags over the environment", map[string]string{workerConfigEnv: file, "SHOAL_CONCURRENCY": "5"},
			[]string{"--concurrency", "7", "--sim-elo=-3", "--time-scale", "100", "--stop-file", "x.exit"},
			func(s *Worker) { s.Concurrency, s.SimElo, s.TimeScale, s.StopFile = 7, -3, 100, "x.exit" }},
		{"--config over the environment's file", map[string]string{workerConfigEnv: "/nonexistent.toml"},
			[]string{"--config", file}, func(s *Worker) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadWorker(t, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultWorker()
			want.Server, want.Username, want.Password = "http://file.example:8000", "fileuser", "filepass"
			want.Concurrency, want.SimElo, want.SimPairTime, want.UUIDPrefix = 2, 1.5, 250*time.Millisecond, "file"
			tt.want(&want)
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestWorkerSettingsErrors(t *testing.T) {
	creds := map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"no username", map[string]string{"SHOAL_PASSWORD": "x"}, nil, []string{"--username"}},
		{"no password", map[string]string{"SHOAL_USERNAME": "x"}, nil, []string{"--password"}},
		{"bad server", creds, []string{"--server", "localhost:8000"}, []string{"server", `"localhost:8000"`, "--server"}},
		{"zero concurrency", creds, []string{"--concurrency", "0"}, []string{"concurrency", "--concurrency", "at least 1"}},
		{"bad prefix", creds, []string{"--uuid-prefix", "x"}, []string{"uuid_prefix", "2 to 8"}},
		{"draw ratio above 1", map[string]string{"SHOAL_USERNAME": "a", "SHOAL_PASSWORD": "b", "SHOAL_SIM_DRAW_RATIO": "1.5"},
			nil, []string{"sim_draw_ratio", "SHOAL_SIM_DRAW_RATIO"}},
		{"zero time scale", creds, []string{"--time-scale", "0"}, []string{"time_scale", "positive"}},
		{"negative pair time", creds, []string{"--sim-pair-time", "-1s"}, []string{"sim_pair_time"}},
		{"unknown key in the file", map[string]string{workerConfigEnv: writeFile(t, "w.toml", "addr = \"x\"\n")}, nil,
			[]string{"unknown key", `"addr"`}},
		{"a number for a string key", map[string]string{workerConfigEnv: writeFile(t, "w.toml", "username = 5\n")}, nil,
			[]string{"username", "must be a string"}},
		{"a positional argument", creds, []string{"extra"}, []string{"unexpected argument"}},
		{"build with an engine", creds, []string{"--build", "--engine", "/usr/games/stockfish"}, []string{"build", "--engine"}},
		{"build with engines", map[string]string{"SHOAL_USERNAME": "a", "SHOAL_PASSWORD": "b", "SHOAL_BUILD": "true", "SHOAL_ENGINES": "/opt/engines"},
			nil, []string{"build", "--engines"}},
		{"a zero build timeout", creds, []string{"--build-timeout", "0s"}, []string{"build_timeout", "positive"}},
		{"an engine binary with a path", creds, []string{"--engine-binary", "../stockfish"}, []string{"engine_binary", "file name"}},
		{"an arch with a space", creds, []string{"--arch", "x86-64 bmi2"}, []string{"arch"}},
		{"an empty build command", creds, []string{"--build-command", " "}, []string{"build_command"}},
		{"no engine cache", creds, []string{"--engine-cache", "0"}, []string{"engine_cache", "at least 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWorker(t, tt.env, tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, part := range tt.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q lacks %q", err, part)
				}
			}
		})
	}
	if _, err := loadWorker(t, creds, "--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	if _, err := loadWorker(t, map[string]string{"SHOAL_USERNAME": "a", "SHOAL_PASSWORD": "hunter2", "SHOAL_SERVER": "ftp://x"}); err == nil ||
		strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v", err)
	}
}

// The example configuration loads as it is.
func TestWorkerExampleConfig(t *testing.T) {
	s, err := loadWorker(t, map[string]string{"SHOAL_PASSWORD": "x"}, "--config", filepath.Join("..", "configs", "worker.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Username != "alice" || s.Concurrency != 3 || s.StopFile != "fish.exit" {
		t.Errorf("unexpected %+v", s)
	}
}

// The build mode's keys, from the file and the flags, and their defaults.
func TestWorkerBuildSettings(t *testing.T) {
	creds := map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}
	s, err := loadWorker(t, creds)
	if err != nil {
		t.Fatal(err)
	}
	if s.Build || s.Dir != "shoal-worker" || s.BuildCommand != "make -j{jobs} build ARCH={arch}" || s.BuildJobs != 0 ||
		s.BuildTimeout != 15*time.Minute || s.EngineCache != 16 || s.EngineCacheMB != 2048 || s.EngineBinary != "stockfish" || s.Arch != "" {
		t.Errorf("defaults %+v", s)
	}
	file := writeFile(t, "w.toml", "build = true\ndir = \"/var/lib/shoal\"\nbuild_command = \"make -j{jobs} profile-build ARCH={arch} COMP=clang\"\n")
	creds[workerConfigEnv] = file
	s, err = loadWorker(t, creds, "--build-jobs", "4", "--build-timeout", "20m", "--engine-cache", "3", "--engine-cache-mb", "100",
		"--engine-binary", "sf", "--arch", "x86-64-avx2", "--books", "/srv/books")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Build || s.Dir != "/var/lib/shoal" || s.BuildCommand != "make -j{jobs} profile-build ARCH={arch} COMP=clang" || s.BuildJobs != 4 ||
		s.BuildTimeout != 20*time.Minute || s.EngineCache != 3 || s.EngineCacheMB != 100 || s.EngineBinary != "sf" || s.Arch != "x86-64-avx2" ||
		s.Books != "/srv/books" {
		t.Errorf("settings %+v", s)
	}
}
