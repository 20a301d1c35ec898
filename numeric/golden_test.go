package numeric

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestCodeTablesGolden renders the value of every fp8 and e2m1 code and
// compares the table with testdata/codes.golden, a file meant to be read:
// any change to a decoded value shows up as a reviewable diff. Run
// `go test ./numeric -run Golden -update` to regenerate it after an
// intended change.
func TestCodeTablesGolden(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# Value of every code, as decoded by package numeric.\n")
	b.WriteString("# Regenerate: go test ./numeric -run Golden -update\n")
	for c := range 256 {
		fmt.Fprintf(&b, "e4m3 %#02x %v\n", c, F32FromE4M3(uint8(c)))
	}
	for c := range 256 {
		fmt.Fprintf(&b, "e5m2 %#02x %v\n", c, F32FromE5M2(uint8(c)))
	}
	for c := range 16 {
		fmt.Fprintf(&b, "e2m1 %#x %v\n", c, F32FromE2M1(uint8(c)))
	}
	path := filepath.Join("testdata", "codes.golden")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		got := bytes.Split(b.Bytes(), []byte("\n"))
		for i, line := range bytes.Split(want, []byte("\n")) {
			if i >= len(got) || !bytes.Equal(got[i], line) {
				g := []byte("<missing>")
				if i < len(got) {
					g = got[i]
				}
				t.Fatalf("%s line %d: got %q, want %q", path, i+1, g, line)
			}
		}
		t.Fatalf("%s: output has extra lines", path)
	}
}
