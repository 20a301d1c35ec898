package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoDriver reports that no usable CUDA driver was found: libcuda.so.1 could
// not be loaded from any searched place, or it loaded but cuInit found no GPU.
// Callers fall back to the CPU when errors.Is(err, ErrNoDriver).
var ErrNoDriver = errors.New("cuda: no CUDA driver")

// ErrNoNVRTC reports that the NVRTC run-time compiler library was not found;
// kernels cannot be compiled, but memory, streams and cuBLAS still work.
var ErrNoNVRTC = errors.New("cuda: no NVRTC library")

// ErrNoCUBLAS reports that the cuBLAS library was not found.
var ErrNoCUBLAS = errors.New("cuda: no cuBLAS library")

// EnvLibraryPath names the environment variable that points the search at a
// directory holding the CUDA libraries, or at one library file.
const EnvLibraryPath = "REPLAYSSM_CUDA_PATH"

// libSpec describes one shared library to find.
type libSpec struct {
	what     string   // human name for messages: "CUDA driver"
	prefix   string   // file name stem: "libnvrtc.so"
	sonames  []string // exact names tried in each directory and by the loader
	glob     bool     // also try versioned names prefix.N[.M...] found in each directory
	notFound error    // sentinel wrapped when nothing loads
	mode     int      // dlopen flags
	preload  []string // stems of libraries loaded first from the same directory (RTLD_GLOBAL)
}

var (
	specDriver = libSpec{
		what: "CUDA driver", prefix: "libcuda.so",
		sonames:  []string{"libcuda.so.1", "libcuda.so"},
		notFound: ErrNoDriver, mode: purego.RTLD_NOW | purego.RTLD_LOCAL,
	}
	specNVRTC = libSpec{
		what: "NVRTC", prefix: "libnvrtc.so",
		sonames:  []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"},
		glob:     true,
		notFound: ErrNoNVRTC, mode: purego.RTLD_NOW | purego.RTLD_LOCAL,
		preload: []string{"libnvrtc-builtins.so"},
	}
	specCUBLAS = libSpec{
		what: "cuBLAS", prefix: "libcublas.so",
		sonames:  []string{"libcublas.so", "libcublas.so.13", "libcublas.so.12"},
		glob:     true,
		notFound: ErrNoCUBLAS, mode: purego.RTLD_NOW | purego.RTLD_LOCAL,
		preload: []string{"libcublasLt.so"},
	}
)

// searchPlan is where libraries are looked for, in order.
type searchPlan struct {
	file   string   // REPLAYSSM_CUDA_PATH when it names a file
	dirs   []string // directories, in order, without duplicates
	loader bool     // finally try the plain soname through the dynamic loader's path
}

// newSearchPlan builds the search order: explicit directories alone when
// given; otherwise $REPLAYSSM_CUDA_PATH, $CUDA_HOME/lib64, $CUDA_PATH/lib64,
// the toolkit's default, the distribution's multiarch directory, the
// container toolkit's mount, and at last the loader path.
func newSearchPlan(getenv func(string) string, explicit []string) searchPlan {
	var p searchPlan
	add := func(dir string) {
		if dir != "" && !slices.Contains(p.dirs, dir) {
			p.dirs = append(p.dirs, filepath.Clean(dir))
		}
	}
	if len(explicit) > 0 {
		for _, d := range explicit {
			add(d)
		}
		return p
	}
	if v := getenv(EnvLibraryPath); v != "" {
		if st, err := os.Stat(v); err == nil && !st.IsDir() {
			p.file = v
			add(filepath.Dir(v))
		} else {
			add(v)
		}
	}
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if v := getenv(env); v != "" {
			add(filepath.Join(v, "lib64"))
		}
	}
	add("/usr/local/cuda/lib64")
	add(multiarchDir())
	add("/usr/local/nvidia/lib64")
	p.loader = true
	return p
}

// multiarchDir is the Debian/Ubuntu library directory for this architecture.
func multiarchDir() string {
	switch runtime.GOARCH {
	case "arm64":
		return "/usr/lib/aarch64-linux-gnu"
	case "ppc64le":
		return "/usr/lib/powerpc64le-linux-gnu"
	default:
		return "/usr/lib/x86_64-linux-gnu"
	}
}

// candidates lists the paths to try for spec under plan, best first.
// Directory entries that do not exist are left out; the loader's plain
// sonames come last.
func (p searchPlan) candidates(spec libSpec) []string {
	var out []string
	add := func(path string) {
		if !slices.Contains(out, path) {
			out = append(out, path)
		}
	}
	if p.file != "" && strings.HasPrefix(filepath.Base(p.file), spec.prefix) {
		add(p.file)
	}
	for _, dir := range p.dirs {
		for _, name := range spec.sonames {
			if fileExists(filepath.Join(dir, name)) {
				add(filepath.Join(dir, name))
			}
		}
		if spec.glob {
			for _, name := range versionedNames(dir, spec.prefix) {
				add(filepath.Join(dir, name))
			}
		}
	}
	if p.loader {
		for _, name := range spec.sonames {
			add(name)
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// versionedNames returns the entries of dir named prefix.N[.M...], newest
// major first and, within a major, the shortest (the soname) first.
func versionedNames(dir, prefix string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type cand struct {
		name  string
		major int
	}
	var cs []cand
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix+".")
		if !ok {
			continue
		}
		majorText, _, _ := strings.Cut(rest, ".")
		major, err := strconv.Atoi(majorText)
		if err != nil {
			continue
		}
		cs = append(cs, cand{e.Name(), major})
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		if a.major != b.major {
			return b.major - a.major
		}
		if len(a.name) != len(b.name) {
			return len(a.name) - len(b.name)
		}
		return strings.Compare(a.name, b.name)
	})
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	return names
}

// loadedLib is a dlopen'ed library and where it came from.
type loadedLib struct {
	handle uintptr
	path   string
}

// openLib loads spec from the first candidate that dlopen accepts. On
// failure the error wraps spec.notFound and names every place searched, with
// the loader's reason for each file that existed but did not load.
func openLib(spec libSpec, plan searchPlan) (loadedLib, error) {
	var failures []string
	for _, path := range plan.candidates(spec) {
		if filepath.IsAbs(path) {
			preload(filepath.Dir(path), spec.preload, path)
		}
		h, err := purego.Dlopen(path, spec.mode)
		if err == nil {
			return loadedLib{handle: h, path: path}, nil
		}
		if filepath.IsAbs(path) {
			failures = append(failures, fmt.Sprintf("%s: %v", path, err))
		} else {
			failures = append(failures, fmt.Sprintf("loader: %v", err))
		}
	}
	var where []string
	if plan.file != "" {
		where = append(where, plan.file)
	}
	where = append(where, plan.dirs...)
	if plan.loader {
		where = append(where, "the dynamic loader path ("+strings.Join(spec.sonames, ", ")+")")
	}
	name := spec.sonames[0]
	if spec.glob {
		name = spec.prefix + "*"
	}
	msg := fmt.Sprintf("%s not found; searched %s", name, strings.Join(where, ", "))
	if len(failures) > 0 {
		msg += "; load errors: " + strings.Join(failures, "; ")
	}
	return loadedLib{}, fmt.Errorf("%w: %s", spec.notFound, msg)
}

// preload dlopens, with RTLD_GLOBAL, the companion libraries a library needs
// (NVRTC's builtins, cuBLAS's Lt) from its own directory, so that they are
// found by soname even when the directory is not on the loader path. The
// companion of the same major version as main is preferred. Failures are
// ignored: the main dlopen then reports what is missing.
func preload(dir string, stems []string, main string) {
	major := ""
	if i := strings.Index(filepath.Base(main), ".so."); i >= 0 {
		major, _, _ = strings.Cut(filepath.Base(main)[i+4:], ".")
	}
	for _, stem := range stems {
		names := versionedNames(dir, stem)
		slices.SortStableFunc(names, func(a, b string) int {
			am := strings.HasPrefix(a, stem+"."+major)
			bm := strings.HasPrefix(b, stem+"."+major)
			switch {
			case am && !bm:
				return -1
			case bm && !am:
				return 1
			}
			return 0
		})
		if fileExists(filepath.Join(dir, stem)) {
			names = append(names, stem)
		}
		for _, n := range names {
			if _, err := purego.Dlopen(filepath.Join(dir, n), purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
				break
			}
		}
	}
}

// symbol resolves the first of names that lib exports: CUDA versions some
// entry points (cuMemAlloc_v2), and the newest name is listed first.
func symbol(lib loadedLib, names ...string) (uintptr, error) {
	for _, n := range names {
		if p, err := purego.Dlsym(lib.handle, n); err == nil && p != 0 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("cuda: %s does not export %s", lib.path, strings.Join(names, " or "))
}

// call invokes a C function. The directive keeps any Go memory whose address
// is converted to uintptr in the argument list alive and in place for the
// duration of the call. It allocates the variadic slice: hot paths use
// Device.callHot instead.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// cptr turns an address returned by C into a pointer without tripping vet's
// uintptr check; it is only used for memory the Go runtime does not manage.
func cptr(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

// goString copies a NUL-terminated C string.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(cptr(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(cptr(p)), n))
}

// cString returns a NUL-terminated copy of s for passing to C; the caller
// keeps the slice alive across the call.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
