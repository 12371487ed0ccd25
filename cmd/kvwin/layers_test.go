package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The shape of the tree, as docs/architecture.md writes it down: the layer
// order (section "Layers"), the top-level folders and the largest share of
// the code one package may hold. These tests read the source tree from the
// module root; they build nothing.

// topLevel is the folders the module root may hold (besides dot-folders).
var topLevel = map[string]bool{
	"cmd": true, "engine": true, "kvcache": true, "router": true, "window": true,
	"attention": true, "gguf": true, "web": true, "internal": true, "deploy": true, "docs": true,
}

// maxShare is the largest share of the module's non-test Go lines one
// package may hold.
const maxShare = 0.15

// maxFuncLines is the longest a function of a non-test, non-generated file
// may be (the redesign's rule: a function that long does several jobs).
const maxFuncLines = 100

// goPackage is one package of the module as the checks see it.
type goPackage struct {
	path    string   // import path
	imports []string // the module's packages its non-test files import
	lines   int      // lines of its non-test Go files
	files   []string // its non-test Go files
}

// layerEntry is one entry of the layer list: an import path, or a sub-tree
// when it ends in "/...".
type layerEntry struct {
	pattern string
	layer   int // 0 is the lowest
}

// matches reports whether pkg is matched by the entry, and how specifically:
// an exact path beats any sub-tree, a longer sub-tree a shorter one.
func (e layerEntry) matches(pkg string) (bool, int) {
	if root, ok := strings.CutSuffix(e.pattern, "/..."); ok {
		if pkg == root || strings.HasPrefix(pkg, root+"/") {
			return true, len(root)
		}
		return false, 0
	}
	return pkg == e.pattern, 1 << 30
}

// layers is the layer list of docs/architecture.md.
type layers []layerEntry

// of returns the entry pkg belongs to: the most specific one matching it.
func (ls layers) of(pkg string) (layerEntry, bool) {
	var best layerEntry
	bestSpec := -1
	for _, e := range ls {
		if ok, spec := e.matches(pkg); ok && spec > bestSpec {
			best, bestSpec = e, spec
		}
	}
	return best, bestSpec >= 0
}

// parseLayers reads the first ```layers fenced block after the "## Layers"
// heading of doc: one layer per line, lowest first, entries separated by
// spaces; text after '#' on a line is a comment.
func parseLayers(doc []byte) (layers, error) {
	var (
		ls               layers
		inSection, inBlk bool
		layer            int
		seen             = map[string]bool{}
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !inSection:
			inSection = strings.TrimSpace(line) == "## Layers"
		case !inBlk && strings.HasPrefix(line, "## "):
			return nil, errors.New(`section "Layers" has no ` + "```layers" + ` block`)
		case !inBlk:
			inBlk = strings.TrimSpace(line) == "```layers"
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			if len(ls) == 0 {
				return nil, errors.New("the layers block is empty")
			}
			return ls, nil
		default:
			line, _, _ = strings.Cut(line, "#")
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			for _, f := range fields {
				if seen[f] {
					return nil, fmt.Errorf("entry %s is listed twice", f)
				}
				seen[f] = true
				ls = append(ls, layerEntry{pattern: f, layer: layer})
			}
			layer++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !inSection {
		return nil, errors.New(`no "## Layers" section`)
	}
	return nil, errors.New("the layers block is not closed")
}

// arrows returns what is wrong with pkgs under ls: packages in no layer,
// imports of a higher layer, imports of another entry of the same layer.
func arrows(ls layers, pkgs []goPackage) []string {
	var bad []string
	for _, p := range pkgs {
		from, ok := ls.of(p.path)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is in no layer", p.path))
			continue
		}
		for _, imp := range p.imports {
			to, ok := ls.of(imp)
			switch {
			case !ok:
				// Reported as a package in no layer.
			case to.layer > from.layer:
				bad = append(bad, fmt.Sprintf("upward arrow: %s (layer %d, %s) imports %s (layer %d, %s)",
					p.path, from.layer+1, from.pattern, imp, to.layer+1, to.pattern))
			case to.layer == from.layer && to.pattern != from.pattern:
				bad = append(bad, fmt.Sprintf("sideways arrow: %s (%s) imports its peer %s (%s), both of layer %d",
					p.path, from.pattern, imp, to.pattern, from.layer+1))
			}
		}
	}
	return bad
}

// moduleRoot is the directory holding go.mod, found from the working
// directory up, and the module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// modulePackages lists the module's packages with non-test Go files: their
// imports of the module's own packages and their lines.
func modulePackages(t *testing.T, root, module string) []goPackage {
	t.Helper()
	ctx := build.Default
	ctx.CgoEnabled = true // cgo files are part of their package whatever the environment says
	var pkgs []goPackage
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		bp, err := ctx.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		files := append(append([]string{}, bp.GoFiles...), bp.CgoFiles...)
		if len(files) == 0 {
			return nil // tests only
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		p := goPackage{path: module}
		if rel != "." {
			p.path = module + "/" + filepath.ToSlash(rel)
		}
		for _, imp := range bp.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				p.imports = append(p.imports, imp)
			}
		}
		for _, f := range files {
			p.files = append(p.files, filepath.Join(path, f))
			data, err := os.ReadFile(filepath.Join(path, f))
			if err != nil {
				return err
			}
			p.lines += bytes.Count(data, []byte("\n"))
			if len(data) > 0 && data[len(data)-1] != '\n' {
				p.lines++
			}
		}
		pkgs = append(pkgs, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) == 0 {
		t.Fatalf("no Go packages under %s", root)
	}
	return pkgs
}

// TestLayers holds the module to the layer order of docs/architecture.md: no
// package outside the list, no import of a higher layer or of a peer.
func TestLayers(t *testing.T) {
	root, module := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := parseLayers(doc)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	pkgs := modulePackages(t, root, module)
	for _, e := range ls {
		used := false
		for _, p := range pkgs {
			if got, _ := ls.of(p.path); got == e {
				used = true
				break
			}
		}
		if !used {
			t.Logf("docs/architecture.md: layer entry %s matches no package", e.pattern)
		}
	}
	for _, msg := range arrows(ls, pkgs) {
		t.Error(msg)
	}
}

// TestTopLevel holds the module root to the design's folders.
func TestTopLevel(t *testing.T) {
	root, _ := moduleRoot(t)
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	// Folders git ignores (bin/, data/: what make build and make run
	// write) are output, not the tree's.
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasSuffix(l, "/") {
				ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !topLevel[e.Name()] && !ignored[e.Name()] {
			t.Errorf("top-level folder %s/ is not one of the design's (docs/architecture.md, Packages)", e.Name())
		}
	}
}

// TestPackageShare holds every package under maxShare of the module's
// non-test Go lines.
func TestPackageShare(t *testing.T) {
	root, module := moduleRoot(t)
	pkgs := modulePackages(t, root, module)
	total := 0
	for _, p := range pkgs {
		total += p.lines
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].lines > pkgs[j].lines })
	for _, p := range pkgs {
		if share := float64(p.lines) / float64(total); share > maxShare {
			t.Errorf("%s holds %d of the module's %d non-test Go lines (%.1f%%, over %.0f%%)",
				p.path, p.lines, total, 100*share, 100*maxShare)
		}
	}
}

// TestArrows checks the layer rule itself on a small made-up module.
func TestArrows(t *testing.T) {
	doc := []byte("# x\n\n## Layers\n\ntext\n\n```layers\n" +
		"m/leaf m/other   # leaves\n" +
		"m/core\n" +
		"m/edge/... m/side\n" +
		"m/edge/low\n" + // a more specific entry above its sub-tree's
		"```\n\n## Next\n")
	ls, err := parseLayers(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 6 {
		t.Fatalf("parsed %d entries, want 6: %v", len(ls), ls)
	}
	for _, tc := range []struct {
		name string
		pkg  goPackage
		want []string
	}{
		{"down", goPackage{path: "m/core", imports: []string{"m/leaf", "m/other"}}, nil},
		{"own sub-tree", goPackage{path: "m/edge/a", imports: []string{"m/edge", "m/edge/b/c", "m/core"}}, nil},
		{"up", goPackage{path: "m/leaf", imports: []string{"m/core"}},
			[]string{"upward arrow: m/leaf (layer 1, m/leaf) imports m/core (layer 2, m/core)"}},
		{"peer", goPackage{path: "m/leaf", imports: []string{"m/other"}},
			[]string{"sideways arrow: m/leaf (m/leaf) imports its peer m/other (m/other), both of layer 1"}},
		{"peer sub-tree", goPackage{path: "m/side", imports: []string{"m/edge/x"}},
			[]string{"sideways arrow: m/side (m/side) imports its peer m/edge/x (m/edge/...), both of layer 3"}},
		{"exact entry beats the sub-tree", goPackage{path: "m/edge/x", imports: []string{"m/edge/low"}},
			[]string{"upward arrow: m/edge/x (layer 3, m/edge/...) imports m/edge/low (layer 4, m/edge/low)"}},
		{"the sub-tree's root", goPackage{path: "m/edge", imports: []string{"m/side"}},
			[]string{"sideways arrow: m/edge (m/edge/...) imports its peer m/side (m/side), both of layer 3"}},
		{"no layer", goPackage{path: "m/stray", imports: []string{"m/core"}}, []string{"m/stray is in no layer"}},
		{"prefix is not a sub-tree", goPackage{path: "m/edgex"}, []string{"m/edgex is in no layer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := arrows(ls, []goPackage{tc.pkg})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, doc string }{
		{"no section", "# x\n```layers\na\n```\n"},
		{"no block", "## Layers\ntext\n## Next\n```layers\na\n```\n"},
		{"empty block", "## Layers\n```layers\n\n```\n"},
		{"unclosed", "## Layers\n```layers\na\n"},
		{"twice", "## Layers\n```layers\na b\na\n```\n"},
	} {
		if _, err := parseLayers([]byte(tc.doc)); err == nil {
			t.Errorf("%s: parsed without an error", tc.name)
		}
	}
}

// TestFunctionLength holds every function of the module's non-test Go
// files to maxFuncLines, generated files aside.
func TestFunctionLength(t *testing.T) {
	root, module := moduleRoot(t)
	fset := token.NewFileSet()
	for _, p := range modulePackages(t, root, module) {
		for _, path := range p.files {
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if ast.IsGenerated(f) {
				continue
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s: %s is %d lines, over %d", rel, fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}
