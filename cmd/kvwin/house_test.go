package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The house rules docs/architecture.md states that a reader could break
// without any other test noticing: abilities are found one way
// (engine.As), a package doc is a paragraph and a link (the why lives in
// docs/; a doc.go, or a package comment in any file, is at most
// maxDocLines), and the LoCoMo format is declared once (bench/locomo).

// maxDocLines is the longest a doc.go may be.
const maxDocLines = 30

// houseRules returns the house rules the file at rel (relative to the
// module root), of package pkg (its import path less the module's), breaks.
func houseRules(fset *token.FileSet, rel, pkg string, f *ast.File) []string {
	var out []string
	if filepath.Base(rel) == "doc.go" {
		// The whole file counts: f.End() stops at the package clause and
		// would pass an essay written after it.
		if n := fset.File(f.Pos()).LineCount(); n > maxDocLines {
			out = append(out, fmt.Sprintf("%s: %d lines, over %d: the why belongs in docs/", rel, n, maxDocLines))
		}
	}
	if f.Doc != nil && filepath.Base(rel) != "doc.go" {
		// A package comment in another file is held to the same length.
		if n := fset.Position(f.Doc.End()).Line - fset.Position(f.Doc.Pos()).Line + 1; n > maxDocLines {
			out = append(out, fmt.Sprintf("%s: a package comment of %d lines, over %d: the why belongs in docs/", rel, n, maxDocLines))
		}
	}
	ability := func(n ast.Node, e ast.Expr) {
		if sel, ok := e.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "engine" {
				out = append(out, fmt.Sprintf("%s:%d: asserts engine.%s: find an ability with engine.As", rel, fset.Position(n.Pos()).Line, sel.Sel.Name))
			}
		}
	}
	ownsAbilities := pkg == "engine" || pkg == "engine/enginetest"
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeAssertExpr:
			if !ownsAbilities && n.Type != nil {
				ability(n, n.Type)
			}
		case *ast.TypeSwitchStmt:
			if !ownsAbilities {
				for _, c := range n.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						ability(c, e)
					}
				}
			}
		case *ast.StructType:
			if pkg == "cmd/kvwin/bench/locomo" {
				break
			}
			for _, fl := range n.Fields.List {
				if fl.Tag != nil && reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("json") == "dia_id" {
					out = append(out, fmt.Sprintf("%s:%d: declares LoCoMo's turn again: use locomo.Turn", rel, fset.Position(fl.Pos()).Line))
				}
			}
		}
		return true
	})
	return out
}

// TestHouseRules holds every non-test Go file of the module to houseRules.
func TestHouseRules(t *testing.T) {
	root, module := moduleRoot(t)
	fset := token.NewFileSet()
	for _, p := range modulePackages(t, root, module) {
		pkg := strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")
		for _, path := range p.files {
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, path)
			for _, v := range houseRules(fset, rel, pkg, f) {
				t.Error(v)
			}
		}
	}
}

// TestHouseRulesCanFail: each rule catches what it is for.
func TestHouseRulesCanFail(t *testing.T) {
	long := "// Package x is an essay.\n" + strings.Repeat("//\n", maxDocLines) + "package x\n"
	for _, tc := range []struct {
		name, rel, pkg, src, want string
	}{
		{"a long doc.go", "x/doc.go", "x", long, "over 30"},
		{"a short doc.go", "x/doc.go", "x", "// Package x is short; docs/x.md says why.\npackage x\n", ""},
		{"a long package comment in another file", "x/x.go", "x", long, "over 30"},
		{"a long comment on a declaration", "x/x.go", "x", "package x\n" + strings.Repeat("//\n", maxDocLines+1) + "func f() {}\n", ""},
		{"a long doc.go after its package clause", "x/doc.go", "x", "// Package x is short.\npackage x\n" + strings.Repeat("//\n", maxDocLines), "over 30"},
		{"an ability asserted", "web/x.go", "web", "package web\nfunc f(b engine.Backend) { _, _ = b.(engine.Embedder) }\n", "engine.Embedder"},
		{"an ability switched on", "web/x.go", "web", "package web\nfunc f(b engine.Backend) {\n switch b.(type) {\n case engine.Embedder:\n }\n}\n", "engine.Embedder"},
		{"an ability asserted in engine", "engine/x.go", "engine", "package engine\nfunc f(b Backend) { _, _ = b.(engine.Embedder) }\n", ""},
		{"engine.As", "web/x.go", "web", "package web\nfunc f(b engine.Backend) { _, _ = engine.As[engine.Embedder](b) }\n", ""},
		{"LoCoMo's turn again", "cmd/kvwin/bench/y/y.go", "cmd/kvwin/bench/y", "package y\ntype T struct {\n\tID string `json:\"dia_id\"`\n}\n", "locomo.Turn"},
		{"LoCoMo's turn at home", "cmd/kvwin/bench/locomo/l.go", "cmd/kvwin/bench/locomo", "package locomo\ntype T struct {\n\tID string `json:\"dia_id\"`\n}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, tc.rel, tc.src, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(houseRules(fset, tc.rel, tc.pkg, f), "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want a violation naming %q", got, tc.want)
			}
		})
	}
}
