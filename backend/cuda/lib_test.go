package cuda

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSearchPlan(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	touch(t, lib)
	tests := []struct {
		name     string
		env      map[string]string
		explicit []string
		wantFile string
		wantDirs []string // expected prefix of the directory list
		loader   bool
	}{
		{
			name:     "defaults",
			wantDirs: []string{"/usr/local/cuda/lib64", multiarchDir(), "/usr/local/nvidia/lib64"},
			loader:   true,
		},
		{
			name:     "override directory first, then CUDA_HOME, CUDA_PATH",
			env:      map[string]string{EnvLibraryPath: "/opt/x", "CUDA_HOME": "/opt/home", "CUDA_PATH": "/opt/path"},
			wantDirs: []string{"/opt/x", "/opt/home/lib64", "/opt/path/lib64", "/usr/local/cuda/lib64"},
			loader:   true,
		},
		{
			name:     "override file",
			env:      map[string]string{EnvLibraryPath: lib},
			wantFile: lib,
			wantDirs: []string{dir, "/usr/local/cuda/lib64"},
			loader:   true,
		},
		{
			name:     "duplicates collapse",
			env:      map[string]string{"CUDA_HOME": "/usr/local/cuda"},
			wantDirs: []string{"/usr/local/cuda/lib64", multiarchDir()},
			loader:   true,
		},
		{
			name:     "explicit directories replace everything",
			env:      map[string]string{EnvLibraryPath: "/opt/x"},
			explicit: []string{"/a", "/b"},
			wantDirs: []string{"/a", "/b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSearchPlan(func(k string) string { return tt.env[k] }, tt.explicit)
			if p.file != tt.wantFile {
				t.Errorf("file = %q, want %q", p.file, tt.wantFile)
			}
			if len(p.dirs) < len(tt.wantDirs) || !slices.Equal(p.dirs[:len(tt.wantDirs)], tt.wantDirs) {
				t.Errorf("dirs = %q, want prefix %q", p.dirs, tt.wantDirs)
			}
			if tt.explicit != nil && len(p.dirs) != len(tt.wantDirs) {
				t.Errorf("dirs = %q, want exactly %q", p.dirs, tt.wantDirs)
			}
			if p.loader != tt.loader {
				t.Errorf("loader = %v, want %v", p.loader, tt.loader)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"libnvrtc.so.12", "libnvrtc.so.13.0.88", "libnvrtc.so.13", "libnvrtc.so",
		"libnvrtc-builtins.so.13.0", "libnvrtc.so.x", "libcuda.so.1"} {
		touch(t, filepath.Join(dir, n))
	}
	p := searchPlan{dirs: []string{dir, filepath.Join(dir, "missing")}, loader: true}
	got := p.candidates(specNVRTC)
	want := []string{
		filepath.Join(dir, "libnvrtc.so"), filepath.Join(dir, "libnvrtc.so.13"), filepath.Join(dir, "libnvrtc.so.12"),
		filepath.Join(dir, "libnvrtc.so.13.0.88"),
		"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
	}
	if !slices.Equal(got, want) {
		t.Errorf("nvrtc candidates:\n got %q\nwant %q", got, want)
	}
	got = p.candidates(specDriver)
	want = []string{filepath.Join(dir, "libcuda.so.1"), "libcuda.so.1", "libcuda.so"}
	if !slices.Equal(got, want) {
		t.Errorf("driver candidates:\n got %q\nwant %q", got, want)
	}
	// An override file is tried first for the library it names only.
	p.file = filepath.Join(dir, "libcuda.so.1")
	if got := p.candidates(specNVRTC); got[0] == p.file {
		t.Errorf("override file %s offered for NVRTC", p.file)
	}
}

func TestVersionedNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"libcublas.so.12.1", "libcublas.so.13", "libcublas.so.13.0.2", "libcublasLt.so.13", "libcublas.so.12"} {
		touch(t, filepath.Join(dir, n))
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"libcublas.so", []string{"libcublas.so.13", "libcublas.so.13.0.2", "libcublas.so.12", "libcublas.so.12.1"}},
		{"libcublasLt.so", []string{"libcublasLt.so.13"}},
		{"libcudnn.so", nil},
	}
	for _, tt := range tests {
		if got := versionedNames(dir, tt.prefix); !slices.Equal(got, tt.want) {
			t.Errorf("versionedNames(%s) = %q, want %q", tt.prefix, got, tt.want)
		}
	}
}

// TestOpenNoDriver runs everywhere: a search confined to an empty directory
// must fail fast with ErrNoDriver and name what it searched.
func TestOpenNoDriver(t *testing.T) {
	dir := t.TempDir()
	touch(t, filepath.Join(dir, "libcuda.so.1")) // present but not a library
	start := time.Now()
	d, err := Open(context.Background(), Options{LibraryDirs: []string{dir}})
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded with a fake libcuda")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("error %v does not match ErrNoDriver", err)
	}
	for _, want := range []string{dir, "libcuda.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Open took %v to fail", el)
	}
}

// TestOpenDefault checks the message the CLI shows on a machine without a
// driver; on a GPU machine it checks that Open works with defaults.
func TestOpenDefault(t *testing.T) {
	d, err := Open(context.Background(), Options{NoKernelCache: true})
	if errors.Is(err, ErrNoDriver) {
		for _, want := range []string{"/usr/local/cuda/lib64", "/usr/local/nvidia/lib64", "loader"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %q", err, want)
			}
		}
		t.Logf("as expected without a GPU: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer d.Close()
	if d.Name() == "" || d.MemoryBytes() <= 0 {
		t.Errorf("name %q, memory %d", d.Name(), d.MemoryBytes())
	}
}

func TestChooseArch(t *testing.T) {
	known := []int{75, 80, 86, 87, 89, 90, 100, 120}
	tests := []struct {
		cc        int
		supported []int
		want      string
		cubin     bool
	}{
		{90, known, "sm_90", true},
		{100, known, "sm_100", true},
		{103, known, "compute_100", false}, // newer than NVRTC: PTX for the driver's JIT
		{130, known, "compute_120", false},
		{90, nil, "sm_90", true},
		{60, known, "compute_75", false},
	}
	for _, tt := range tests {
		arch, cubin := chooseArch(tt.cc, tt.supported)
		if arch != tt.want || cubin != tt.cubin {
			t.Errorf("chooseArch(%d) = %s, %v; want %s, %v", tt.cc, arch, cubin, tt.want, tt.cubin)
		}
	}
}

func TestCacheKey(t *testing.T) {
	base := cacheKey("src", []string{"-a"}, "sm_90", 13, 0)
	if !strings.HasSuffix(base, "-sm_90-nvrtc13.0.cubin") {
		t.Errorf("key %s", base)
	}
	differ := []string{
		cacheKey("src ", []string{"-a"}, "sm_90", 13, 0),
		cacheKey("src", []string{"-b"}, "sm_90", 13, 0),
		cacheKey("src", []string{"-a", ""}, "sm_90", 13, 0),
		cacheKey("src", []string{"-a"}, "sm_89", 13, 0),
		cacheKey("src", []string{"-a"}, "sm_90", 13, 1),
		cacheKey("src-a", nil, "sm_90", 13, 0),
	}
	for i, k := range differ {
		if k == base {
			t.Errorf("variant %d has the same key %s", i, k)
		}
	}
	if k := cacheKey("src", []string{"-a"}, "compute_90", 13, 0); !strings.HasSuffix(k, ".ptx") {
		t.Errorf("PTX key %s", k)
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "k.cubin")
	for _, data := range [][]byte{[]byte("first"), []byte("second, longer")} {
		if err := writeAtomic(path, data); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(data) {
			t.Fatalf("read back %q, %v; want %q", got, err, data)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "cuMemAlloc_v2(1073741824 bytes)", Code: cuOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	if got, want := e.Error(), "cuda: cuMemAlloc_v2(1073741824 bytes): CUDA_ERROR_OUT_OF_MEMORY"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, ErrOutOfMemory) {
		t.Error("driver OOM does not match ErrOutOfMemory")
	}
	nv := &Error{Op: "nvrtcCompileProgram", Code: 2, Name: "NVRTC_ERROR_OUT_OF_MEMORY"}
	if errors.Is(nv, ErrOutOfMemory) {
		t.Error("an NVRTC code 2 matches ErrOutOfMemory")
	}
}
