package gitmirror

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	local := t.TempDir()
	unlisted := t.TempDir()
	m := newTestMirrors(t, Config{Allowed: []string{"https://github.com/", "https://git.example.org/team", local}})
	tests := []struct {
		name string
		repo string
		why  string // a part of the refusal's text; "" for allowed
	}{
		{"a GitHub repository", "https://github.com/official-stockfish/Stockfish", ""},
		{"a GitHub repository with .git and a slash", "https://github.com/official-stockfish/Stockfish.git/", ""},
		{"a repository under a prefix with a path", "https://git.example.org/team/engine", ""},
		{"the prefix's path itself", "https://git.example.org/team", ""},
		{"a host in upper case", "https://GitHub.com/a/b", ""},
		{"a listed local path", local, ""},
		{"a listed local path with a slash", local + "/", ""},
		{"a look-alike host", "https://github.com.evil.org/x/y", "not under any allowed prefix"},
		{"a sibling of the prefix's path", "https://git.example.org/teamx/engine", "not under any allowed prefix"},
		{"another host", "https://gitlab.com/a/b", "not under any allowed prefix"},
		{"http", "http://github.com/a/b", `scheme "http"`},
		{"ssh", "ssh://git@github.com/a/b", `scheme "ssh"`},
		{"git protocol", "git://github.com/a/b", `scheme "git"`},
		{"file URL", "file:///tmp/x", `scheme "file"`},
		{"file URL of a listed path", "file://" + local, `scheme "file"`},
		{"scp-like", "git@github.com:a/b", "scp-like"},
		{"ext transport", "ext::sh -c touch% /tmp/pwned", "whitespace"},
		{"ext transport without spaces", "ext::sh", "transport helper"},
		{"user info", "https://user:pw@github.com/a/b", "user info"},
		{"user name only", "https://user@github.com/a/b", "user info"},
		{"a query", "https://github.com/a/b?x=1", "query"},
		{"a fragment", "https://github.com/a/b#f", "fragment"},
		{"a dot-dot segment", "https://github.com/a/../b", "'..'"},
		{"a dot segment", "https://github.com/a/./b", "'..'"},
		{"an empty segment", "https://github.com/a//b", "empty path segment"},
		{"percent-encoding", "https://github.com/a/%2e%2e/b", "percent"},
		{"an option disguised as a URL", "-uhttps://github.com/a/b", "begins with '-'"},
		{"an option after a space", "https://github.com/a/b --upload-pack=touch /tmp/x", "whitespace"},
		{"an option", "--upload-pack=touch /tmp/x", "begins with '-'"},
		{"a tab", "https://github.com/a/b\tc", "whitespace"},
		{"a newline", "https://github.com/a/b\n", "whitespace"},
		{"a backslash", `https://github.com/a\b`, "backslash"},
		{"no host", "https:///a/b", "no host"},
		{"no path", "https://github.com", "names no repository"},
		{"empty", "", "empty"},
		{"an unlisted local path", unlisted, "not listed"},
		{"a local path with dot-dot", local + "/../" + filepath.Base(local), "not a clean"},
		{"a relative path", "repos/engine", "relative path"},
		{"a relative path with a colon", "./a:b", "relative path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.Check(tt.repo)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want allowed", tt.repo, err)
				}
				return
			}
			if !errors.Is(err, ErrNotAllowed) {
				t.Fatalf("Check(%q) = %v, want ErrNotAllowed", tt.repo, err)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("Check(%q) = %q, want it to say %q", tt.repo, err, tt.why)
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Errorf("Check(%q) = %q shows the password", tt.repo, err)
			}
		})
	}
}

func TestCanonicalGitHubURLsShareAMirror(t *testing.T) {
	// GitHub's names are case-insensitive, and so is the allowed prefix's match on GitHub.
	m := newTestMirrors(t, Config{Allowed: []string{"https://github.com/Official-Stockfish/Stockfish"}})
	const want = "https://github.com/official-stockfish/stockfish"
	for _, repo := range []string{
		"https://github.com/official-stockfish/Stockfish",
		"https://github.com/official-stockfish/Stockfish/",
		"https://github.com/official-stockfish/Stockfish.git",
		"https://www.github.com/official-stockfish/Stockfish",
		"https://github.com/Official-Stockfish/stockfish",
		"https://github.com/OFFICIAL-STOCKFISH/STOCKFISH.git",
		"https://GitHub.com/official-stockfish/stockfish",
	} {
		tg, err := m.policy(repo)
		if err != nil {
			t.Fatalf("policy(%q): %v", repo, err)
		}
		if tg.canon != want {
			t.Errorf("policy(%q) = %q, want %s", repo, tg.canon, want)
		}
	}
	t.Run("another host keeps its case", func(t *testing.T) {
		m := newTestMirrors(t, Config{Allowed: []string{"https://git.example.org/"}})
		tg, err := m.policy("https://git.example.org/Team/Engine")
		if err != nil || tg.canon != "https://git.example.org/Team/Engine" {
			t.Errorf("policy = %q, %v; want https://git.example.org/Team/Engine", tg.canon, err)
		}
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"an http prefix", Config{Allowed: []string{"http://github.com/"}}, `"http://github.com/"`},
		{"a prefix without a host", Config{Allowed: []string{"https:///x"}}, `"https:///x"`},
		{"a relative path", Config{Allowed: []string{"repos/x"}}, `"repos/x"`},
		{"an unclean path", Config{Allowed: []string{"/srv/../etc"}}, `"/srv/../etc"`},
		{"a prefix with user info", Config{Allowed: []string{"https://u:p@github.com/"}}, "user info"},
		{"a missing git", Config{Git: "/nonexistent/git"}, "install git"},
		{"a missing CA file", Config{CAFile: "/nonexistent/ca.pem"}, "CAFile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Dir = t.TempDir()
			m, err := New(tt.cfg)
			if err == nil {
				m.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestIsGitHub(t *testing.T) {
	tests := []struct {
		repo string
		want bool
	}{
		{"https://github.com/official-stockfish/Stockfish", true},
		{"https://github.com/official-stockfish/Stockfish/", true},
		{"https://github.com/official-stockfish/Stockfish.git", true},
		{"https://www.github.com/vondele/Stockfish", true},
		{"https://GitHub.com/vondele/Stockfish", true},
		{"http://github.com/a/b", false},
		{"https://github.com/a", false},
		{"https://github.com/a/b/c", false},
		{"https://github.com.evil.org/a/b", false},
		{"https://user@github.com/a/b", false},
		{"https://github.com/a/b?x", false},
		{"git@github.com:a/b", false},
		{"/srv/git/Stockfish", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsGitHub(tt.repo); got != tt.want {
			t.Errorf("IsGitHub(%q) = %v, want %v", tt.repo, got, tt.want)
		}
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		ok      bool
		hex     string
		refName string
	}{
		{"a branch", "master", true, "", "master"},
		{"a branch with slashes", "feature/eval-tweak_2", true, "", "feature/eval-tweak_2"},
		{"a tag", "sf_16.1", true, "", "sf_16.1"},
		{"a short SHA", "AbCd123", true, "abcd123", "AbCd123"},
		{"a full SHA", strings.Repeat("A", 40), true, strings.Repeat("a", 40), ""},
		{"hex too short for a SHA", "abc", true, "", "abc"},
		{"empty", "", false, "", ""},
		{"an option", "-x", false, "", ""},
		{"upload-pack", "--upload-pack=x", false, "", ""},
		{"dot-dot", "a..b", false, "", ""},
		{"a space", "a b", false, "", ""},
		{"a reflog", "@{-1}", false, "", ""},
		{"a lock file", "x.lock", false, "", ""},
		{"a component lock file", "x.lock/y", false, "", ""},
		{"a leading dot", ".x", false, "", ""},
		{"a component's leading dot", "a/.x", false, "", ""},
		{"a leading slash", "/x", false, "", ""},
		{"a trailing slash", "x/", false, "", ""},
		{"a trailing dot", "x.", false, "", ""},
		{"a double slash", "a//b", false, "", ""},
		{"a colon", "a:b", false, "", ""},
		{"a caret", "master^", false, "", ""},
		{"a tilde", "master~1", false, "", ""},
		{"a newline", "a\nb", false, "", ""},
		{"a glob", "a*", false, "", ""},
		{"too long", strings.Repeat("a", 201), false, "", ""},
		{"hex past 40 digits", strings.Repeat("a", 41), true, "", strings.Repeat("a", 41)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseRef(tt.ref)
			if !tt.ok {
				if !errors.Is(err, ErrBadRef) {
					t.Fatalf("parseRef(%q) = %+v, %v; want ErrBadRef", tt.ref, r, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRef(%q): %v", tt.ref, err)
			}
			if r.hex != tt.hex || r.name != tt.refName {
				t.Errorf("parseRef(%q) = %+v, want hex %q name %q", tt.ref, r, tt.hex, tt.refName)
			}
		})
	}
}

func TestCheckFilePath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"src/evaluate.h", true},
		{"README.md", true},
		{"a b/c", true},
		{"", false},
		{"/etc/passwd", false},
		{"../x", false},
		{"src/../../x", false},
		{"src//x", false},
		{"./x", false},
		{".", false},
		{"-x", false},
		{"a\nb", false},
	}
	for _, tt := range tests {
		if got := checkFilePath(tt.path) == ""; got != tt.ok {
			t.Errorf("checkFilePath(%q) ok = %v, want %v", tt.path, got, tt.ok)
		}
	}
}

// FuzzPolicy checks that no repository string the policy admits could be read by git as an
// option or carries whitespace, and that the policy never panics.
func FuzzPolicy(f *testing.F) {
	for _, s := range []string{"https://github.com/a/b", "-u", "git@x:y", "https://h/a/../b", "/srv/x", "ext::sh"} {
		f.Add(s)
	}
	m, err := New(Config{Dir: f.TempDir(), Allowed: []string{"https://github.com/", "/srv/x"}})
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	f.Fuzz(func(t *testing.T, repo string) {
		tg, err := m.policy(repo)
		if err != nil {
			return
		}
		if strings.HasPrefix(tg.canon, "-") || strings.ContainsAny(tg.canon, " \t\n\r\\?#@") {
			t.Fatalf("policy(%q) admitted %q", repo, tg.canon)
		}
		if !strings.HasPrefix(tg.canon, "https://github.com/") && tg.canon != "/srv/x" {
			t.Fatalf("policy(%q) admitted %q outside the allowed", repo, tg.canon)
		}
	})
}
