package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/shoal-chess/shoal/"

// allowedImports is the one-way package layering: which of Shoal's own packages each part may
// import (tests included). A part is a top-level folder, or a folder inside one
// that has its own entry (server/api, server/ui, ...): a package belongs to the longest entry
// its path starts with, and within a part imports are free. It is the whole rule: .golangci.yml's
// depguard denies the main upward imports for editors, a part of the same, and this test makes
// `make test` hold the line without it.
//
// The product binary (cmd/shoal) links what an operator runs: never the measuring apparatus
// (bench, the fleet simulator worker/fleet, demo), which is cmd/shoal-bench's; its tests may
// drive a server with it (testImports).
//
// Inside server the rule is: server wires its parts and lists every route; server/api (the
// worker and JSON API) and the web UI's packages never import server nor each other, and share
// only server/guard, except that the web UI's areas (server/ui/runs, server/ui/people,
// server/ui/networks) import what their pages share (server/ui); server/ui/live never imports
// the web UI it streams. server/ui/uitest, the UI's test kit, drives the whole server, and only
// tests import it.
var allowedImports = map[string][]string{
	"cmd/shoal":          {"node", "server", "scheduler", "worker", "protocol", "rundb", "rundb/embedded", "tokenpool", "stats", "metrics", "config", "gitmirror", "books"},
	"cmd/shoal-bench":    {"node", "scheduler", "worker", "worker/fleet", "protocol", "rundb", "config", "demo", "bench"},
	"node":               {"server", "server/guard", "scheduler", "rundb", "rundb/journal", "rundb/embedded", "tokenpool", "metrics", "config", "gitmirror", "books", "notify"},
	"server":             {"server/api", "server/ui", "server/ui/runs", "server/ui/people", "server/ui/networks", "server/guard", "scheduler", "rundb", "protocol", "tokenpool", "static", "metrics", "gitmirror", "books"},
	"server/api":         {"server/guard", "scheduler", "rundb", "stats", "protocol", "tokenpool", "gitmirror", "books"},
	"server/ui":          {"server/guard", "scheduler", "rundb", "protocol", "tokenpool", "templates"},
	"server/ui/runs":     {"server/ui", "server/ui/live", "server/chart", "scheduler", "rundb", "stats", "protocol", "tokenpool", "gitmirror", "books"},
	"server/ui/people":   {"server/ui", "server/guard", "rundb", "protocol", "tokenpool", "notify"},
	"server/ui/networks": {"server/ui", "server/guard", "server/chart", "rundb", "stats", "tokenpool", "books"},
	"server/ui/live":     {"server/guard", "rundb"},
	"server/ui/uitest":   {"server", "server/guard", "server/servertest", "scheduler", "rundb", "rundb/runcache", "tokenpool"},
	"server/guard":       {"rundb", "tokenpool"},
	"server/chart":       {},
	"server/servertest":  {},
	"scheduler":          {"rundb", "rundb/runcache", "rundb/journal", "stats", "metrics", "gitmirror", "books", "protocol", "notify"},
	"notify":             {"rundb", "metrics"},
	"rundb":              {"metrics", "config", "rundb/embedded"},
	"rundb/runcache":     {"rundb", "rundb/journal", "metrics"},
	"rundb/journal":      {"rundb", "metrics"},
	"rundb/embedded":     {},
	"config":             {},
	"metrics":            {},
	"stats":              {},
	"worker":             {"protocol", "books", "filelock"},
	"protocol":           {},
	"tokenpool":          {},
	"templates":          {},
	"static":             {},
	"gitmirror":          {"filelock"},
	"filelock":           {},
	"books":              {"protocol"},
	"worker/fleet":       {"worker", "protocol"},
	"demo":               {"scheduler", "rundb", "worker", "worker/fleet", "protocol", "gitmirror"},
	"bench":              {"demo", "rundb", "rundb/journal", "worker", "worker/fleet", "protocol", "config"},
}

// testImports are the parts a part's test files may import besides allowedImports. The product's
// end-to-end tests drive its servers with the simulated fleet and the demo's accounts. The API's
// and the web UI's tests drive the whole server, which routes to their handlers; Go's import
// cycle check keeps such an import to their external test packages (package api_test,
// ui_test, runs_test, ...), so the packages themselves still never import server. The web UI's
// tests build the server through server/ui/uitest, with the scheduler they choose. Likewise the
// journal's tests drive it through the run cache, and the embedded database's through
// rundb.Open. Tests that build a scheduler build its run cache (and journal) too.
var testImports = map[string][]string{
	"cmd/shoal":          {"demo", "bench", "worker/fleet", "rundb/runcache", "rundb/journal"},
	"node":               {"rundb/runcache"},
	"server":             {"server/servertest"},
	"server/api":         {"server", "server/servertest", "rundb/runcache", "rundb/journal", "metrics"},
	"server/ui":          {"server", "server/ui/uitest", "rundb/runcache"},
	"server/ui/runs":     {"server", "server/servertest", "server/ui/uitest", "rundb/runcache"},
	"server/ui/people":   {"server", "server/servertest", "server/ui/uitest", "rundb/runcache"},
	"server/ui/networks": {"server", "server/servertest", "server/ui/uitest", "scheduler", "rundb/runcache"},
	"rundb/journal":      {"rundb/runcache"},
	"rundb/embedded":     {"rundb"},
}

// partOf is the part a package (its path below the module) belongs to, or "" for none.
func partOf(pkg string) string {
	part := ""
	for p := range allowedImports {
		if (pkg == p || strings.HasPrefix(pkg, p+"/")) && len(p) > len(part) {
			part = p
		}
	}
	return part
}

func TestPackageLayering(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		part := partOf(filepath.ToSlash(filepath.Dir(rel)))
		if part == "" {
			top := strings.Split(filepath.ToSlash(rel), "/")[0]
			t.Errorf("%s: top-level folder %q has no layering rule; add it to allowedImports and .golangci.yml", rel, top)
			return nil
		}
		allowed := allowedImports[part]
		if strings.HasSuffix(path, "_test.go") {
			allowed = append(allowed[:len(allowed):len(allowed)], testImports[part]...)
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, module) {
				continue
			}
			target := partOf(strings.TrimPrefix(p, module))
			if target == part {
				continue // inside its own part
			}
			ok := false
			for _, a := range allowed {
				ok = ok || target == a
			}
			if !ok {
				t.Errorf("%s imports %s: %s may only import %v", rel, strings.TrimPrefix(p, module), part, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
