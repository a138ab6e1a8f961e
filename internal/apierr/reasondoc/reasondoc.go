// Package reasondoc checks, from tests, that a service's proto documents
// every error reason its code can return. A client switches on the reason
// of a google.rpc.ErrorInfo; one it was never told of is a reason it
// cannot handle.
package reasondoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// reasonLiteral is a string literal spelled like a reason of more than one
// word (AIP-193's UPPER_SNAKE_CASE).
var reasonLiteral = regexp.MustCompile(`^[A-Z][A-Z0-9_]*[A-Z0-9]$`)

// Used returns the reasons the Go code under dirs (recursively, test files
// and testdata left out) can put in an error: string literals spelled like
// a reason that are the value of a field named Reason, of a constant
// whose name starts with Reason, or an argument of a call. Literals
// compared against, switched on or used as map keys are not reasons
// given, and are not returned.
func Used(dirs ...string) ([]string, error) {
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			collect(f, seen)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out, nil
}

func collect(f *ast.File, seen map[string]bool) {
	add := func(e ast.Expr) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		s, err := strconv.Unquote(lit.Value)
		if err == nil && reasonLiteral.MatchString(s) {
			seen[s] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Reason" {
				add(n.Value)
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if strings.HasPrefix(name.Name, "Reason") || strings.HasPrefix(name.Name, "reason") {
					if i < len(n.Values) {
						add(n.Values[i])
					}
				}
			}
		case *ast.CallExpr:
			for _, a := range n.Args {
				add(a)
			}
		}
		return true
	})
}

// Undocumented returns the reasons of used that the leading comment of
// service in the proto file does not name (as a word of its own), less
// those in notReasons: literals the heuristics of Used take for reasons
// that are not (a finding's kind, a flag's value).
func Undocumented(protoFile, service string, used []string, notReasons ...string) ([]string, error) {
	text, err := os.ReadFile(protoFile)
	if err != nil {
		return nil, err
	}
	doc := serviceComment(string(text), service)
	skip := map[string]bool{}
	for _, r := range notReasons {
		skip[r] = true
	}
	var missing []string
	for _, r := range used {
		if skip[r] {
			continue
		}
		if !regexp.MustCompile(`(^|[^A-Z0-9_])` + r + `([^A-Z0-9_]|$)`).MatchString(doc) {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

// serviceComment returns the lines of // comment right above
// "service NAME {" in a proto file's text, "" if there are none.
func serviceComment(text, service string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "service "+service+" {" {
			continue
		}
		var doc []string
		for j := i - 1; j >= 0; j-- {
			c, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "//")
			if !ok {
				break
			}
			doc = append([]string{c}, doc...)
		}
		return strings.Join(doc, "\n")
	}
	return ""
}
