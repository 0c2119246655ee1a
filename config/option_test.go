package config

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// tool is the settings of a command with a file, a key that the environment also sets, and
// keys that are flags alone, like `shoal-bench fleet` or `shoal-bench bench`.
type tool struct {
	Server string
	Seed   uint64
	Ratio  float64
	Wait   time.Duration
	Pin    bool
	Count  int
}

func toolTable(withFile bool) Table[tool] {
	t := Table[tool]{Options: []Option[tool]{
		String("server", "where to connect", func(s *tool) *string { return &s.Server }, nil),
		Uint64("seed", "random seed", func(s *tool) *uint64 { return &s.Seed }).FlagOnly(),
		Float("ratio", "a share", func(s *tool) *float64 { return &s.Ratio }, func(f float64) error {
			if f < 0 || f > 1 {
				return errors.New("must be from 0 to 1")
			}
			return nil
		}).FlagOnly(),
		Duration("wait", "how long", func(s *tool) *time.Duration { return &s.Wait }, nil).FlagOnly(),
		Bool("pin", "pin to a core", func(s *tool) *bool { return &s.Pin }).FlagOnly(),
		Int("count", "how many", func(s *tool) *int { return &s.Count }, 1, "must be a positive integer").WithFlag("n"),
	}}
	if withFile {
		t.ConfigEnv = "SHOAL_TOOL_CONFIG"
	}
	return t
}

func loadTool(t *testing.T, withFile bool, env map[string]string, args ...string) (tool, Sources, error) {
	t.Helper()
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return toolTable(withFile).Load(fs, args, mapEnv(env), tool{Server: "http://a", Pin: true, Count: 1})
}

func TestTableFlagOnlyKeys(t *testing.T) {
	file := writeFile(t, "tool.toml", "server = \"http://file\"\n")
	tests := []struct {
		name     string
		withFile bool
		env      map[string]string
		args     []string
		want     tool
		wantErr  string
		wantFrom map[string]string
	}{
		{
			name:     "flags set every kind of value",
			args:     []string{"--server", "http://b", "--seed", "18446744073709551615", "--ratio", "0.25", "--wait", "1.5", "--pin=false", "--n", "3"},
			want:     tool{Server: "http://b", Seed: 1<<64 - 1, Ratio: 0.25, Wait: 1500 * time.Millisecond, Count: 3},
			wantFrom: map[string]string{"server": "--server", "seed": "--seed", "pin": "--pin", "count": "--n"},
		},
		{
			name:     "a key with an environment variable reads it",
			env:      map[string]string{"SHOAL_SERVER": "http://env"},
			want:     tool{Server: "http://env", Pin: true, Count: 1},
			wantFrom: map[string]string{"server": "SHOAL_SERVER", "seed": "default"},
		},
		{
			name: "a flag-only key ignores the environment",
			env:  map[string]string{"SHOAL_SEED": "7", "SHOAL_PIN": "false"},
			want: tool{Server: "http://a", Pin: true, Count: 1},
		},
		{
			name:     "a table without a file reads none, even when its variable is set",
			env:      map[string]string{"SHOAL_TOOL_CONFIG": file},
			want:     tool{Server: "http://a", Pin: true, Count: 1},
			wantFrom: map[string]string{"server": "default"},
		},
		{
			name:     "a table with a file reads it",
			withFile: true,
			env:      map[string]string{"SHOAL_TOOL_CONFIG": file},
			want:     tool{Server: "http://file", Pin: true, Count: 1},
			wantFrom: map[string]string{"server": "config file " + file},
		},
		{
			name:     "a flag-only key is unknown to the file",
			withFile: true,
			args:     []string{"--config", writeFile(t, "seed.toml", "seed = 3\n")},
			wantErr:  `unknown key "seed"`,
		},
		{
			name:    "a table without a file has no --config",
			args:    []string{"--config", file},
			wantErr: "flag provided but not defined: -config",
		},
		{
			name:    "a seed must be a whole number",
			args:    []string{"--seed", "-1"},
			wantErr: `invalid seed "-1" (from --seed): must be zero or a positive integer`,
		},
		{
			name:    "a float is checked",
			args:    []string{"--ratio", "2"},
			wantErr: `invalid ratio "2" (from --ratio): must be from 0 to 1`,
		},
		{
			name:    "a float must be finite",
			args:    []string{"--ratio", "NaN"},
			wantErr: `invalid ratio "NaN" (from --ratio): must be a number`,
		},
		{
			name:    "the key's own name is in the message of a renamed flag",
			args:    []string{"--n", "0"},
			wantErr: `invalid count "0" (from --n): must be a positive integer`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, sources, err := loadTool(t, tt.withFile, tt.env, tt.args...)
			if tt.wantErr != "" {
				wantErrorParts(t, err, []string{tt.wantErr})
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			for key, want := range tt.wantFrom {
				if sources.Of(key) != want {
					t.Errorf("%s from %q, want %q", key, sources.Of(key), want)
				}
			}
		})
	}
}

// The help of a table's flags names each kind, shows a switch's default when it is on, says
// which environment variable a key reads, and comes after the command's own text.
func TestTableHelp(t *testing.T) {
	var out strings.Builder
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(&out)
	_, _, err := toolTable(false).Load(fs, []string{"-help"}, mapEnv(nil), tool{Server: "http://a", Pin: true, Count: 1})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-help: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"  -seed int\n", "  -ratio float\n", "  -wait duration\n    \thow long\n", "  -n int\n",
		"  -server string\n", "where to connect (env SHOAL_SERVER)", "pin to a core (default true)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, &out)
		}
	}
	if strings.Contains(out.String(), "SHOAL_SEED") || strings.Contains(out.String(), "-config") {
		t.Errorf("help offers what a flag-only table has not:\n%s", &out)
	}

	out.Reset()
	fs = flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(&out)
	tab := toolTable(false)
	tab.Help = "usage: tool [flags]\n"
	_, _, err = tab.Load(fs, []string{"-help"}, mapEnv(nil), tool{})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-help: %v, want flag.ErrHelp", err)
	}
	if !strings.HasPrefix(out.String(), "usage: tool [flags]\n") || !strings.Contains(out.String(), "  -wait duration\n") {
		t.Errorf("the command's own text is not first:\n%s", &out)
	}
}

func TestTableSetCheckAndChanged(t *testing.T) {
	tab := toolTable(false)
	s, sources := tool{Count: 1}, Sources{}
	if err := tab.Set(&s, sources, "count", "4", "--other"); err != nil || s.Count != 4 || sources.Of("count") != "--other" {
		t.Errorf("Set: %v, count %d from %s", err, s.Count, sources.Of("count"))
	}
	wantErrorParts(t, tab.Set(&s, sources, "count", "x", "--other"), []string{`invalid count "x" (from --other)`})
	wantErrorParts(t, tab.Set(&s, sources, "counts", "1", "--other"), []string{`"counts": no such key`})

	s.Count = 0
	wantErrorParts(t, tab.Check(&s, sources), []string{`invalid count "0" (from --other): must be a positive integer`})

	a, b := tool{Server: "x", Count: 1}, tool{Server: "y", Count: 1, Wait: time.Second}
	if got, want := tab.Changed(&a, &b), []string{"server", "wait"}; !slices.Equal(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}
}
