package layers

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the module's own code may be
// (tests and generated code aside): past it, a function does several
// things that want names of their own.
const maxFuncLines = 80

// maxStoreLines bounds the allocator's store (tests aside): the contract,
// both stores and their one encoding. The speed layers in it each show a
// figure in bench/results/allocator-store-size.md; a change that needs
// more room cuts elsewhere in the store or argues for a new bound there.
const maxStoreLines = 6000

// sources calls fn with every Go file under the module-relative dirs that
// is neither a test, testdata nor generated code, parsed, and its text.
func sources(t *testing.T, fn func(path string, fset *token.FileSet, f *ast.File, src []byte), dirs ...string) {
	t.Helper()
	n := 0
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join("../..", dir), func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil || ast.IsGenerated(f) {
				return err
			}
			n++
			fn(filepath.ToSlash(strings.TrimPrefix(path, "../../")), fset, f, src)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatalf("no Go source found under %v", dirs)
	}
}

func TestFunctionLength(t *testing.T) {
	sources(t, func(path string, fset *token.FileSet, f *ast.File, _ []byte) {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d", path, fd.Name.Name, n, maxFuncLines)
			}
		}
	}, "services", "internal", "clients")
}

func TestStoreSize(t *testing.T) {
	lines := 0
	sources(t, func(_ string, _ *token.FileSet, _ *ast.File, src []byte) { lines += bytes.Count(src, []byte("\n")) }, "services/allocator/store")
	if lines > maxStoreLines {
		t.Errorf("services/allocator/store is %d lines (tests aside), more than %d", lines, maxStoreLines)
	}
	t.Logf("services/allocator/store: %d lines of %d", lines, maxStoreLines)
}
