package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestKernelSyntax parses every kernel module as host C++ with g++
// -fsyntax-only, CUDA's keywords and intrinsics stood in for by
// testdata/cuda_host.h: the replay modules with the options the planner
// gives each golden case (decode and prefill modules), and the standalone
// files. It needs no GPU and no NVRTC, so a kernel's misspelt name or
// wrong type shows on any machine with a C++ compiler; it does not check
// what only NVRTC knows (device-only rules, inline PTX, uninstantiated
// templates).
func TestKernelSyntax(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the kernels' host-side syntax check needs a C++ compiler")
	}
	host, err := filepath.Abs("testdata/cuda_host.h")
	if err != nil {
		t.Fatal(err)
	}
	type unit struct {
		name, src string
		defines   []string
	}
	var units []unit
	seen := map[string]bool{}
	for _, c := range planCases() {
		if !syntaxCase(c) {
			continue
		}
		plan, err := c.plan(c.opt)
		if err != nil {
			continue // the golden file records the refusal
		}
		src, err := replaySource(plan.file)
		if err != nil {
			t.Fatal(err)
		}
		var defines []string
		for _, o := range plan.options(64) {
			if strings.HasPrefix(o, "-D") {
				defines = append(defines, o)
			}
		}
		for _, extra := range []string{"-DPREFILL_MODULE=0", "-DPREFILL_MODULE=1"} {
			d := append(append([]string(nil), defines...), extra)
			key := plan.file + strings.Join(d, " ")
			if !seen[key] {
				seen[key] = true
				units = append(units, unit{c.name + " " + extra, src, d})
			}
		}
	}
	for _, f := range []string{"nn.cu", "conv.cu", "copy.cu", "fill.cu", "saxpy.cu", "sample.cu"} {
		src, err := KernelSource(f)
		if err != nil {
			t.Fatal(err)
		}
		units = append(units, unit{f, src, nil})
	}
	dir := t.TempDir()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, u := range units {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			path := filepath.Join(dir, strings.NewReplacer(" ", "_", "/", "_").Replace(u.name)+".cpp")
			if err := os.WriteFile(path, []byte("#include \""+host+"\"\n"+u.src), 0o644); err != nil {
				mu.Lock()
				t.Error(err)
				mu.Unlock()
				return
			}
			// The planner's GPU (planCases' h200) is an sm_90.
			args := append([]string{"-std=c++17", "-fsyntax-only", "-w", "-D__CUDA_ARCH__=900"}, u.defines...)
			var out bytes.Buffer
			cmd := exec.Command(gxx, append(args, path)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				mu.Lock()
				t.Errorf("%s (unit %d): g++: %v\n%s", u.name, i, err, firstLines(out.String(), 12))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d units parsed", len(units))
}

// syntaxCase picks the golden plan cases TestKernelSyntax parses: every
// target shape's baseline and replay modules in fp32, a bf16 checkpoint
// with an nvfp4 read copy, fp8 with an fp8 read copy and a bf16 ring, each
// of which turns on different kernels (about 50 modules; all 200 took 30 s
// of a 2-core CI machine for little more).
func syntaxCase(c planCase) bool {
	for _, s := range []string{" baseline fp32 ", " baseline e4m3 ", " replay fp32 ", " replay bf16+nvfp4 ", " replay e4m3+e4m3 ", "ring"} {
		if strings.Contains(c.name+" ", s) {
			return true
		}
	}
	return false
}

// firstLines is s's first n lines.
func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
