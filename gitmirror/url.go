package gitmirror

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// allowRule is one Config.Allowed entry, parsed once by New.
type allowRule struct {
	// host is the lower-case host[:port] of an https prefix, "" for a local path.
	host string
	// path is the prefix's URL path without its trailing slash, or the clean local path.
	path string
}

// target is a repository that passed the policy: what the mirror calls it and what git
// fetches.
type target struct {
	// canon names the repository in the mirrors' keys, in errors and in the mirror's own
	// description file; it is also the URL or path git fetches.
	canon string
	// local: canon is a listed absolute path, fetched with the file protocol.
	local bool
}

// parseAllowed parses one Config.Allowed entry, refusing any an operator could not have meant:
// a prefix that is not a plain https URL with a host, or a path that is not absolute and clean.
func parseAllowed(entry string) (allowRule, error) {
	if why := unsafeText(entry); why != "" {
		return allowRule{}, fmt.Errorf("allowed entry %q: %s", entry, why)
	}
	if strings.HasPrefix(entry, "/") {
		clean := filepath.Clean(entry)
		if entry != clean && entry != clean+"/" {
			return allowRule{}, fmt.Errorf("allowed entry %q: not a clean absolute path (write %q)", entry, clean)
		}
		return allowRule{path: clean}, nil
	}
	if !strings.HasPrefix(strings.ToLower(entry), "https://") {
		return allowRule{}, fmt.Errorf("allowed entry %q: neither an https:// URL prefix nor an absolute local path", entry)
	}
	host, p, why := parseHTTPS(entry, true)
	if why != "" {
		return allowRule{}, fmt.Errorf("allowed entry %q: %s", entry, why)
	}
	return allowRule{host: host, path: p}, nil
}

// unsafeText returns why s can never be a repository or an allowed entry, or "".
func unsafeText(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > 1024:
		return "longer than 1024 bytes"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.HasPrefix(s, "-"):
		return "begins with '-', which git would read as an option"
	case strings.ContainsRune(s, '\\'):
		return "contains a backslash"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || unicode.IsSpace(r) || unicode.IsControl(r) {
			return "contains whitespace or control characters"
		}
	}
	return ""
}

// parseHTTPS checks an https URL (a repository, or a prefix when prefix is set) and returns its
// lower-case host and its path without trailing slashes, or why it is refused.
func parseHTTPS(s string, prefix bool) (host, p, why string) {
	switch {
	case strings.ContainsRune(s, '?'):
		return "", "", "has a query ('?')"
	case strings.ContainsRune(s, '#'):
		return "", "", "has a fragment ('#')"
	case strings.ContainsRune(s, '%'):
		return "", "", "has percent-encoding ('%')"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", "", "does not parse as a URL"
	}
	switch {
	case u.User != nil || strings.ContainsRune(u.Host, '@'):
		return "", "", "has user info (credentials never belong in a repository URL)"
	case u.Opaque != "":
		return "", "", "is not a hierarchical URL"
	case u.Host == "" || u.Hostname() == "":
		return "", "", "has no host"
	}
	if port := u.Port(); port != "" {
		for _, c := range port {
			if c < '0' || c > '9' {
				return "", "", "has a bad port"
			}
		}
	}
	p = strings.TrimRight(u.Path, "/")
	if p != "" {
		for _, seg := range strings.Split(p[1:], "/") {
			switch seg {
			case ".", "..":
				return "", "", "has a '.' or '..' path segment"
			case "":
				return "", "", "has an empty path segment ('//')"
			}
		}
	}
	if p == "" && !prefix {
		return "", "", "names no repository (no path)"
	}
	return strings.ToLower(u.Host), p, ""
}

// Check reports whether repo may be mirrored: nil, or an error wrapping ErrNotAllowed that says
// why.
func (m *Mirrors) Check(repo string) error {
	_, err := m.policy(repo)
	return err
}

// policy checks repo against the shapes allowed and the operator's list, and returns it in
// its canonical form.
func (m *Mirrors) policy(repo string) (target, error) {
	refuse := func(why string) (target, error) {
		return target{}, fmt.Errorf("repository %s: %w: %s", quoteRepo(repo), ErrNotAllowed, why)
	}
	if why := unsafeText(repo); why != "" {
		return refuse(why)
	}
	if strings.HasPrefix(repo, "/") {
		clean := filepath.Clean(repo)
		if repo != clean && repo != clean+"/" {
			return refuse("not a clean absolute path ('.', '..' or '//')")
		}
		for _, r := range m.rules {
			if r.host == "" && r.path == clean {
				return target{canon: clean, local: true}, nil
			}
		}
		return refuse("a local path the operator has not listed")
	}
	if strings.Contains(repo, "::") {
		return refuse("a git transport helper address ('::')")
	}
	i := strings.Index(repo, "://")
	if i < 0 {
		if c := strings.IndexByte(repo, ':'); c >= 0 && !strings.Contains(repo[:c], "/") {
			return refuse("an scp-like ssh address; use an https:// URL")
		}
		return refuse("a relative path; only https:// URLs and listed absolute paths are allowed")
	}
	if scheme := strings.ToLower(repo[:i]); scheme != "https" {
		return refuse(fmt.Sprintf("scheme %q; only https:// URLs and listed absolute paths are allowed", scheme))
	}
	host, p, why := parseHTTPS(repo, false)
	if why != "" {
		return refuse(why)
	}
	canon := "https://" + host + p
	under := func(r allowRule) bool {
		return r.host == host && (r.path == "" || p == r.path || strings.HasPrefix(p, r.path+"/"))
	}
	if owner, name, ok := gitHubParts(host, p); ok {
		// GitHub answers for "x", "x.git", "www." and any case of the owner's and the
		// repository's names: one mirror for all of them, and an allowed prefix matches
		// without regard to case.
		path := "/" + strings.ToLower(owner) + "/" + strings.ToLower(name)
		canon = "https://github.com" + path
		raw := under
		under = func(r allowRule) bool {
			prefix := strings.ToLower(r.path)
			return raw(r) || r.host == "github.com" &&
				(prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/"))
		}
	}
	for _, r := range m.rules {
		if under(r) {
			return target{canon: canon}, nil
		}
	}
	return refuse("not under any allowed prefix")
}

// quoteRepo quotes repo for an error message, bounded in length; repo may be anything a user
// typed, so nothing of it is trusted to be printable.
func quoteRepo(repo string) string {
	if u, err := url.Parse(repo); err == nil && u.User != nil {
		u.User = nil
		repo = u.String() + " (user info removed)"
	}
	if len(repo) > 200 {
		repo = repo[:200] + "..."
	}
	return fmt.Sprintf("%q", repo)
}

// IsGitHub reports whether repo is a GitHub repository URL, the only kind fishtest's worker
// can download sources of.
func IsGitHub(repo string) bool {
	if unsafeText(repo) != "" || !strings.HasPrefix(strings.ToLower(repo), "https://") {
		return false
	}
	host, p, why := parseHTTPS(repo, false)
	if why != "" {
		return false
	}
	_, _, ok := gitHubParts(host, p)
	return ok
}

// gitHubParts splits a GitHub repository URL's host and path into owner and repository name,
// without a ".git" suffix.
func gitHubParts(host, p string) (owner, name string, ok bool) {
	if host != "github.com" && host != "www.github.com" {
		return "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) != 2 {
		return "", "", false
	}
	owner, name = parts[0], strings.TrimSuffix(parts[1], ".git")
	if !gitHubName(owner) || !gitHubName(name) {
		return "", "", false
	}
	return owner, name, true
}

// gitHubName reports whether s can be a GitHub owner or repository name.
func gitHubName(s string) bool {
	if s == "" || len(s) > 100 || s == "." || s == ".." {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// refSpec is a ref a user asked for, checked.
type refSpec struct {
	name string // the ref as given, for branch and tag lookups; "" if it cannot be one
	hex  string // lower-case hex when the ref can be a (short) SHA, else ""
}

// full reports whether the ref is a full SHA.
func (r refSpec) full() bool { return len(r.hex) == 40 }

// parseRef checks ref: 4 to 40 hex digits (a SHA, which may also be a branch's name), or a branch
// or tag name by git's check-ref-format rules, narrowed to the characters real names use.
func parseRef(ref string) (refSpec, error) {
	bad := func(why string) (refSpec, error) {
		return refSpec{}, fmt.Errorf("ref %s: %w: %s", quoteRepo(ref), ErrBadRef, why)
	}
	if ref == "" {
		return bad("empty")
	}
	var r refSpec
	if len(ref) >= 4 && len(ref) <= 40 && isHex(ref) {
		r.hex = strings.ToLower(ref)
	}
	if why := refNameProblem(ref); why != "" {
		if r.hex != "" {
			return r, nil
		}
		return bad(why)
	}
	if len(r.hex) < 40 {
		// A full SHA is taken for a commit only; a branch named like one would be a trap.
		r.name = ref
	}
	return r, nil
}

// refNameProblem returns why name cannot be a branch or tag name, or "".
func refNameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > 200:
		return "longer than 200 bytes"
	case name[0] == '-':
		return "begins with '-'"
	case name[0] == '.' || name[0] == '/':
		return "begins with '.' or '/'"
	case strings.Contains(name, ".."):
		return "contains '..'"
	case strings.Contains(name, "//"):
		return "contains '//'"
	case strings.Contains(name, "@{"):
		return "contains '@{'"
	case strings.HasSuffix(name, "/") || strings.HasSuffix(name, "."):
		return "ends with '/' or '.'"
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '/' || c == '-' || c == '+') {
			return fmt.Sprintf("contains %q (a branch or tag name has letters, digits and . _ / - + only)", rune(c))
		}
	}
	for _, comp := range strings.Split(name, "/") {
		if strings.HasPrefix(comp, ".") || strings.HasSuffix(comp, ".lock") {
			return "has a component beginning with '.' or ending with '.lock'"
		}
	}
	return ""
}

// isHex reports whether s is hex digits only.
func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// parseSHA checks a full SHA and returns it in lower case.
func parseSHA(sha string) (string, error) {
	if len(sha) != 40 || !isHex(sha) {
		return "", fmt.Errorf("commit %s: %w: not a full SHA (40 hex digits)", quoteRepo(sha), ErrBadRef)
	}
	return strings.ToLower(sha), nil
}

// checkFilePath returns why p cannot be the path of a file in a commit, or "".
func checkFilePath(p string) string {
	switch {
	case p == "":
		return "empty"
	case len(p) > 4096:
		return "longer than 4096 bytes"
	case !utf8.ValidString(p):
		return "not valid UTF-8"
	case p[0] == '/':
		return "absolute"
	case p[0] == '-':
		return "begins with '-'"
	case path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../"):
		return "not a clean relative path"
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "contains control characters"
		}
	}
	return ""
}
