package cuda

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sync/singleflight"
)

// EnvKernelCache names the environment variable that overrides the
// directory of compiled kernels.
const EnvKernelCache = "REPLAYSSM_KERNEL_CACHE"

// nvrtcAPI holds NVRTC's entry points.
type nvrtcAPI struct {
	lib                                  loadedLib
	major, minor                         int
	archs                                []int // SM versions NVRTC can emit SASS for, e.g. 90
	version, getErrorString              uintptr
	create, compile, destroy             uintptr
	logSize, log                         uintptr
	cubinSize, cubin, ptxSize, ptx       uintptr
	numSupportedArchs, getSupportedArchs uintptr
}

// CompileInfo describes how a Module was produced.
type CompileInfo struct {
	Arch      string        // "sm_90" (cubin) or "compute_90" (PTX for the driver's JIT)
	NVRTC     string        // NVRTC version, "13.0"
	Options   []string      // the full NVRTC option list
	CacheHit  bool          // loaded from the disk cache without compiling
	CachePath string        // the cache file, "" without a cache
	CacheErr  error         // why the result could not be cached, if it could not
	Compile   time.Duration // NVRTC time; 0 on a cache hit and where Joined
	// Joined: another caller was compiling the same image at the same time;
	// this one waited for its result instead of running NVRTC again.
	Joined bool
}

// CompileStats counts a Device's module builds (Compile): those NVRTC
// compiled and the NVRTC time they took, and those loaded from the disk
// cache. A first run's wait is mostly NVRTC's; the counts say how much.
type CompileStats struct {
	Compiled  int
	NVRTC     time.Duration // summed over the compiles, which may overlap
	FromCache int
	Joined    int // took another caller's build of the same image (CompileInfo.Joined)
}

// CompileStats reports the modules this Device has built so far.
func (d *Device) CompileStats() CompileStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.compiled
}

// String is the counts in words: "12 modules compiled (NVRTC 41.2 s), 3
// from the kernel cache, 2 from builds in flight".
func (s CompileStats) String() string {
	return fmt.Sprintf("%d modules compiled (NVRTC %.1f s), %d from the kernel cache, %d from builds in flight",
		s.Compiled, s.NVRTC.Seconds(), s.FromCache, s.Joined)
}

// nvrtcLib loads NVRTC on first use.
func (d *Device) nvrtcLib() (*nvrtcAPI, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nvrtc != nil || d.nvrtcErr != nil {
		return d.nvrtc, d.nvrtcErr
	}
	d.nvrtc, d.nvrtcErr = loadNVRTC(d.plan)
	return d.nvrtc, d.nvrtcErr
}

func loadNVRTC(plan searchPlan) (*nvrtcAPI, error) {
	lib, err := openLib(specNVRTC, plan)
	if err != nil {
		return nil, err
	}
	n := &nvrtcAPI{lib: lib}
	for _, e := range []struct {
		dst  *uintptr
		name string
	}{
		{&n.version, "nvrtcVersion"}, {&n.getErrorString, "nvrtcGetErrorString"},
		{&n.create, "nvrtcCreateProgram"}, {&n.compile, "nvrtcCompileProgram"},
		{&n.destroy, "nvrtcDestroyProgram"}, {&n.logSize, "nvrtcGetProgramLogSize"},
		{&n.log, "nvrtcGetProgramLog"}, {&n.cubinSize, "nvrtcGetCUBINSize"},
		{&n.cubin, "nvrtcGetCUBIN"}, {&n.ptxSize, "nvrtcGetPTXSize"}, {&n.ptx, "nvrtcGetPTX"},
		{&n.numSupportedArchs, "nvrtcGetNumSupportedArchs"}, {&n.getSupportedArchs, "nvrtcGetSupportedArchs"},
	} {
		p, err := symbol(lib, e.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoNVRTC, err)
		}
		*e.dst = p
	}
	var major, minor, count int32
	if err := n.check(call(n.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))), "nvrtcVersion", ""); err != nil {
		return nil, err
	}
	n.major, n.minor = int(major), int(minor)
	if err := n.check(call(n.numSupportedArchs, uintptr(unsafe.Pointer(&count))), "nvrtcGetNumSupportedArchs", ""); err != nil {
		return nil, err
	}
	if count > 0 {
		archs := make([]int32, count)
		if err := n.check(call(n.getSupportedArchs, uintptr(unsafe.Pointer(&archs[0]))), "nvrtcGetSupportedArchs", ""); err != nil {
			return nil, err
		}
		for _, a := range archs {
			n.archs = append(n.archs, int(a))
		}
	}
	return n, nil
}

// check turns an nvrtcResult into an *Error carrying the program log.
func (n *nvrtcAPI) check(r uintptr, op, log string) error {
	code := uint32(r)
	if code == 0 {
		return nil
	}
	name := goString(call(n.getErrorString, uintptr(code)))
	if name == "" {
		name = fmt.Sprintf("nvrtcResult(%d)", code)
	}
	return &Error{Op: op, Code: int(code), Name: name, Log: log}
}

// chooseArch picks the NVRTC target for a device of compute capability
// cc (e.g. 90): SASS for cc itself when NVRTC knows it, else PTX for the
// newest virtual architecture NVRTC knows below cc, which the driver
// compiles at load (the fallback for GPUs newer than the compiler).
func chooseArch(cc int, supported []int) (arch string, cubin bool) {
	if len(supported) == 0 || slices.Contains(supported, cc) {
		return fmt.Sprintf("sm_%d", cc), true
	}
	best := 0
	for _, a := range supported {
		if a <= cc && a > best {
			best = a
		}
	}
	if best == 0 {
		best = slices.Min(supported)
	}
	return fmt.Sprintf("compute_%d", best), false
}

// kernelCacheDir resolves the disk cache directory; "" disables caching.
func (d *Device) kernelCacheDir() string {
	if d.opts.NoKernelCache {
		return ""
	}
	if d.opts.KernelCache != "" {
		return d.opts.KernelCache
	}
	if v := os.Getenv(EnvKernelCache); v != "" {
		return v
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "replayssm", "kernels")
}

// cacheKey names a compiled image: the source and options decide the
// output, the target and NVRTC version decide its form.
func cacheKey(source string, options []string, arch string, major, minor int) string {
	h := sha256.New()
	h.Write([]byte(source))
	for _, o := range options {
		h.Write([]byte{0})
		h.Write([]byte(o))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:40]
	ext := ".cubin"
	if strings.HasPrefix(arch, "compute_") {
		ext = ".ptx"
	}
	return fmt.Sprintf("%s-%s-nvrtc%d.%d%s", sum, arch, major, minor, ext)
}

// Compile builds CUDA C++ source with NVRTC for this GPU and loads it. The
// result is cached on disk, keyed by the source, options, target and NVRTC
// version, so a second run skips NVRTC. options are NVRTC flags
// ("--use_fast_math", "-DTILE=64"); a --gpu-architecture option replaces the
// automatic choice (e.g. "--gpu-architecture=sm_90a" for wgmma). A
// compilation error carries NVRTC's log.
func (d *Device) Compile(ctx context.Context, name, source string, options ...string) (*Module, error) {
	image, info, err := d.compileImage(ctx, name, source, options, false)
	if err != nil {
		return nil, err
	}
	m, err := d.loadModule(name, image)
	if err != nil && info.CacheHit {
		// An unloadable cache entry (truncated by a crash of another
		// writer's filesystem, say) is rebuilt and replaced.
		if image, info, err = d.compileImage(ctx, name, source, options, true); err != nil {
			return nil, err
		}
		m, err = d.loadModule(name, image)
	}
	if err != nil {
		return nil, err
	}
	m.info = info
	return m, nil
}

// compileImage is Compile's image (the cubin, or the NUL-terminated PTX)
// and what it took, once for the callers that ask for the same image at
// once (the tests' parallel subtests, the bench's prewarm): the first reads
// the disk cache, unless damaged (its entry did not load; a rebuild is a
// flight of its own), or builds and caches it, and the others wait for its
// bytes (Joined, or CacheHit where it was read). A caller whose context
// ends stops waiting; the build finishes for the rest and the cache.
func (d *Device) compileImage(ctx context.Context, name, source string, options []string, damaged bool) ([]byte, CompileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, CompileInfo{}, err
	}
	n, err := d.nvrtcLib()
	if err != nil {
		return nil, CompileInfo{}, err
	}
	arch, cubin := chooseArch(10*d.ccMajor+d.ccMinor, n.archs)
	opts := slices.Clone(options)
	if i := slices.IndexFunc(opts, func(o string) bool {
		return strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch")
	}); i >= 0 {
		_, v, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(opts[i], "--gpu-architecture"), "-arch"), "=")
		arch, cubin = v, strings.HasPrefix(v, "sm_")
	} else {
		opts = append([]string{"--gpu-architecture=" + arch}, opts...)
	}
	info := CompileInfo{Arch: arch, NVRTC: fmt.Sprintf("%d.%d", n.major, n.minor), Options: opts}
	key := cacheKey(source, opts, arch, n.major, n.minor)
	if dir := d.kernelCacheDir(); dir != "" {
		info.CachePath = filepath.Join(dir, key)
	}
	count := func(f func(s *CompileStats)) {
		d.mu.Lock()
		f(&d.compiled)
		d.mu.Unlock()
	}
	flight := key
	if damaged {
		flight += " rebuilt"
	}
	leader := false
	ch := d.builds.DoChan(flight, func() (any, error) {
		leader = true
		if info.CachePath != "" && !damaged {
			if image, err := os.ReadFile(info.CachePath); err == nil {
				if !cubin {
					image = nulTerminated(image)
				}
				return builtImage{image: image, cached: true}, nil
			}
		}
		start := time.Now()
		image, err := n.build(name, source, opts, cubin)
		if err != nil {
			return nil, err
		}
		b := builtImage{image: image, took: time.Since(start)}
		count(func(s *CompileStats) { s.Compiled++; s.NVRTC += b.took })
		if info.CachePath != "" {
			b.cacheErr = writeAtomic(info.CachePath, image)
		}
		return b, nil
	})
	var r singleflight.Result
	select {
	case r = <-ch:
	case <-ctx.Done():
		return nil, CompileInfo{}, ctx.Err()
	}
	if r.Err != nil {
		return nil, CompileInfo{}, r.Err
	}
	b := r.Val.(builtImage)
	switch {
	case b.cached:
		info.CacheHit = true
		count(func(s *CompileStats) { s.FromCache++ })
	case leader:
		info.Compile, info.CacheErr = b.took, b.cacheErr
	default:
		info.Joined = true
		count(func(s *CompileStats) { s.Joined++ })
	}
	return b.image, info, nil
}

// builtImage is a single-flight build's result (Compile).
type builtImage struct {
	image    []byte
	took     time.Duration
	cacheErr error
	cached   bool // read from the disk cache, not built
}

// build runs NVRTC and returns the cubin, or the NUL-terminated PTX.
func (n *nvrtcAPI) build(name, source string, opts []string, cubin bool) ([]byte, error) {
	csrc, cname := cString(source), cString(name)
	var prog uintptr
	if err := n.check(call(n.create, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0),
		"nvrtcCreateProgram("+name+")", ""); err != nil {
		return nil, err
	}
	defer call(n.destroy, uintptr(unsafe.Pointer(&prog)))

	// The option array holds addresses of Go byte slices; they stay
	// reachable through cOpts until after the call, and the Go heap does
	// not move objects.
	cOpts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts)+1)
	for i, o := range opts {
		cOpts[i] = cString(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cOpts[i][0]))
	}
	r := call(n.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cOpts)
	if uint32(r) != 0 {
		return nil, n.check(r, "nvrtcCompileProgram("+name+", "+strings.Join(opts, " ")+")", n.programLog(prog))
	}
	sizeFn, getFn, what := n.cubinSize, n.cubin, "CUBIN"
	if !cubin {
		sizeFn, getFn, what = n.ptxSize, n.ptx, "PTX"
	}
	var size uintptr
	if err := n.check(call(sizeFn, prog, uintptr(unsafe.Pointer(&size))), "nvrtcGet"+what+"Size("+name+")", ""); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("cuda: nvrtc %s: empty %s", name, what)
	}
	image := make([]byte, size)
	if err := n.check(call(getFn, prog, uintptr(unsafe.Pointer(&image[0]))), "nvrtcGet"+what+"("+name+")", ""); err != nil {
		return nil, err
	}
	if !cubin {
		image = nulTerminated(image)
	}
	return image, nil
}

// programLog fetches NVRTC's diagnostics for prog.
func (n *nvrtcAPI) programLog(prog uintptr) string {
	var size uintptr
	if call(n.logSize, prog, uintptr(unsafe.Pointer(&size))) != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, size)
	if call(n.log, prog, uintptr(unsafe.Pointer(&buf[0]))) != 0 {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00\n")
}

// nulTerminated returns b with a trailing NUL, as cuModuleLoadData needs for
// PTX text.
func nulTerminated(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == 0 {
		return b
	}
	return append(b, 0)
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename, so concurrent processes never read a partial file.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("cuda: kernel cache: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cuda: kernel cache: %w", werr)
	}
	return nil
}
