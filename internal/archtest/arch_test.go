// Package archtest holds the module's dependency rules as tests: which
// packages may import what (STYLE.md, "dependency tests that fail when a
// package imports what it must not").
package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/replayssm/replayssm"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: is this the module root?", len(pkgs))
	}
	return pkgs
}

// TestDependencyRules: the numeric formats, the references and the state
// cache stand alone (no GPU backend, no purego, no model code), and only the
// CUDA backend talks to native libraries through purego.
func TestDependencyRules(t *testing.T) {
	pkgs := listPackages(t)
	forbidden := map[string][]string{
		module + "/numeric": {module + "/", "github.com/ebitengine/purego"},
		module + "/ssm":     {module + "/backend", module + "/model", "github.com/ebitengine/purego"},
		module + "/replay":  {module + "/backend", module + "/model", module + "/engine", "github.com/ebitengine/purego"},
		module + "/tensor":  {module + "/backend", "github.com/ebitengine/purego"},
	}
	for path, bad := range forbidden {
		p, ok := pkgs[path]
		if !ok {
			t.Errorf("package %s not found", path)
			continue
		}
		for _, d := range p.Deps {
			for _, b := range bad {
				if strings.HasPrefix(d, b) && d != path {
					t.Errorf("%s depends on %s", path, d)
				}
			}
		}
	}
	for path, p := range pkgs {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/ebitengine/purego") && path != module+"/backend/cuda" {
				t.Errorf("%s imports purego; only backend/cuda may", path)
			}
		}
	}
}
