package numeric

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStandardLibraryOnly fails if a non-test file of this package imports
// anything outside the standard library: the codecs must stay usable from
// every backend without pulling dependencies along. Standard-library import
// paths have no dot in their first element; module paths do.
func TestStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", name, imp.Path.Value, err)
			}
			if !isStandard(path) {
				t.Errorf("%s imports %q, which is not in the standard library", name, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("found no package files to check")
	}
}

// isStandard reports whether an import path belongs to the standard library.
// "C" (cgo) is rejected too: the package must stay pure Go.
func isStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return path != "C" && !strings.Contains(first, ".")
}

func TestIsStandard(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"math", true}, {"math/rand/v2", true}, {"fmt", true},
		{"github.com/replayssm/replayssm/backend/cuda", false},
		{"golang.org/x/text", false}, {"example.com", false}, {"C", false},
	}
	for _, tt := range tests {
		if got := isStandard(tt.path); got != tt.want {
			t.Errorf("isStandard(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}
