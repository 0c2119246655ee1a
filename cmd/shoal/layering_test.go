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

// allowedImports is the one-way package layering of STYLE.md: which of Shoal's own packages
// each top-level part may import (tests included). It is the whole rule: .golangci.yml's
// depguard denies the main upward imports for editors, a part of the same, and this test makes
// `make test` hold the line without it.
var allowedImports = map[string][]string{
	"cmd":       {"node", "server", "scheduler", "worker", "protocol", "rundb", "tokenpool", "stats", "metrics", "config", "demo", "bench"},
	"node":      {"server", "scheduler", "rundb", "tokenpool", "metrics", "config"},
	"server":    {"scheduler", "rundb", "stats", "protocol", "tokenpool", "templates", "static", "metrics"},
	"scheduler": {"rundb", "stats", "metrics"},
	"rundb":     {"metrics", "config"},
	"config":    {},
	"metrics":   {},
	"stats":     {},
	"worker":    {"protocol"},
	"protocol":  {},
	"tokenpool": {},
	"templates": {},
	"static":    {},
	"demo":      {"scheduler", "rundb", "worker", "protocol"},
	"bench":     {"demo", "rundb", "worker", "protocol"},
}

func TestPackageLayering(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		part := strings.Split(filepath.ToSlash(rel), "/")[0]
		allowed, known := allowedImports[part]
		if !known {
			t.Errorf("%s: top-level folder %q has no layering rule; add it to allowedImports and .golangci.yml", rel, part)
			return nil
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
			target := strings.TrimPrefix(p, module)
			if strings.HasPrefix(target, part+"/") || target == part {
				continue // inside its own part
			}
			ok := false
			for _, a := range allowed {
				ok = ok || target == a || strings.HasPrefix(target, a+"/")
			}
			if !ok {
				t.Errorf("%s imports %s: %s may only import %v", rel, target, part, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
