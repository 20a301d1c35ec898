package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sync/singleflight"
)

// Options configures Open. The zero value opens GPU 0 with the default
// library search and kernel cache.
type Options struct {
	// Ordinal selects the GPU (0-based, in the driver's enumeration order).
	Ordinal int
	// LibraryDirs, when non-empty, are the only directories searched for
	// libcuda, NVRTC and cuBLAS: the environment, the system directories and
	// the loader path are then ignored.
	LibraryDirs []string
	// KernelCache is the directory for compiled kernels. Empty means
	// $REPLAYSSM_KERNEL_CACHE, else os.UserCacheDir()/replayssm/kernels.
	KernelCache string
	// NoKernelCache disables the on-disk kernel cache: every Compile runs NVRTC.
	NoKernelCache bool
}

// Device attributes read by Open (CUdevice_attribute values).
const (
	attrMultiprocessors  = 16
	attrL2CacheBytes     = 38
	attrCCMajor          = 75
	attrCCMinor          = 76
	attrSharedOptinBytes = 97
	attrSharedPerSMBytes = 81
)

// Pinned parameter area: an array of argument pointers followed by the
// argument bytes, plus room for GEMM scalars.
const (
	pinnedPtrsOff    = 0
	pinnedDataOff    = maxArgs * 8
	pinnedScalarsOff = pinnedDataOff + maxArgBytes
	pinnedBytes      = pinnedScalarsOff + 64
)

// Device is one GPU with its primary context. Its methods may be called from
// any goroutine.
type Device struct {
	drv     *driverAPI
	plan    searchPlan
	opts    Options
	ordinal int
	cuDev   uintptr // CUdevice
	ctx     uintptr // CUcontext (primary)

	name          string
	ccMajor       int
	ccMinor       int
	memBytes      int64
	smCount       int
	l2Bytes       int
	sharedOptin   int
	sharedPerSM   int
	driverVersion int

	// hot guards the scratch argument array and the pinned parameter
	// buffer, which make the launch path allocation-free, and closed.
	hot     sync.Mutex
	scratch [24]uintptr
	pinned  uintptr // cuMemHostAlloc'ed, pinnedBytes long
	closed  bool

	mu       sync.Mutex // guards the fields below
	nvrtc    *nvrtcAPI
	nvrtcErr error
	blas     *blasAPI
	blasErr  error
	kernels  map[string]*Module // embedded kernel modules, by file name
	compiled CompileStats
	builds   singleflight.Group // Compile's NVRTC runs in flight, by cache key
}

// Open loads the CUDA driver, retains the primary context of GPU
// opt.Ordinal and reads its properties. Without a usable driver the error
// wraps ErrNoDriver and lists every place searched.
func Open(ctx context.Context, opt Options) (*Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	plan := newSearchPlan(os.Getenv, opt.LibraryDirs)
	lib, err := openLib(specDriver, plan)
	if err != nil {
		return nil, err
	}
	drv, err := loadDriver(lib)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d := &Device{drv: drv, plan: plan, opts: opt, ordinal: opt.Ordinal, kernels: map[string]*Module{}}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) open() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv := d.drv
	if err := drv.check(call(drv.init, 0), "cuInit"); err != nil {
		// A driver library without a GPU (containers, stub libraries) is
		// "no usable driver" for the caller's fallback decision.
		return fmt.Errorf("%w: %s: %w", ErrNoDriver, drv.lib.path, err)
	}
	var version, count int32
	if err := drv.check(call(drv.driverGetVersion, uintptr(unsafe.Pointer(&version))), "cuDriverGetVersion"); err != nil {
		return err
	}
	d.driverVersion = int(version)
	if err := drv.check(call(drv.deviceGetCount, uintptr(unsafe.Pointer(&count))), "cuDeviceGetCount"); err != nil {
		return err
	}
	if count == 0 {
		return fmt.Errorf("%w: %s: no CUDA device", ErrNoDriver, drv.lib.path)
	}
	if d.ordinal < 0 || d.ordinal >= int(count) {
		return fmt.Errorf("cuda: device ordinal %d out of range: %d device(s)", d.ordinal, count)
	}
	var dev int32
	if err := drv.check(call(drv.deviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.ordinal)), "cuDeviceGet(%d)", d.ordinal); err != nil {
		return err
	}
	d.cuDev = uintptr(dev)
	name := make([]byte, 256)
	if err := drv.check(call(drv.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), d.cuDev), "cuDeviceGetName"); err != nil {
		return err
	}
	d.name = strings.TrimRight(string(name), "\x00")
	if i := strings.IndexByte(d.name, 0); i >= 0 {
		d.name = d.name[:i]
	}
	var mem uint64
	if err := drv.check(call(drv.deviceTotalMem, uintptr(unsafe.Pointer(&mem)), d.cuDev), "cuDeviceTotalMem"); err != nil {
		return err
	}
	d.memBytes = int64(mem)
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{attrCCMajor, &d.ccMajor}, {attrCCMinor, &d.ccMinor}, {attrMultiprocessors, &d.smCount},
		{attrL2CacheBytes, &d.l2Bytes}, {attrSharedOptinBytes, &d.sharedOptin},
		{attrSharedPerSMBytes, &d.sharedPerSM},
	} {
		var v int32
		if err := drv.check(call(drv.deviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), d.cuDev), "cuDeviceGetAttribute(%d)", a.attr); err != nil {
			return err
		}
		*a.dst = int(v)
	}
	var ctx uintptr
	if err := drv.check(call(drv.primaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), d.cuDev), "cuDevicePrimaryCtxRetain(%d)", d.ordinal); err != nil {
		return err
	}
	d.ctx = ctx
	if err := drv.check(call(drv.ctxSetCurrent, d.ctx), "cuCtxSetCurrent"); err != nil {
		call(drv.primaryCtxRelease, d.cuDev)
		return err
	}
	var pinned uintptr
	const portable = 1 // CU_MEMHOSTALLOC_PORTABLE
	if err := drv.check(call(drv.memHostAlloc, uintptr(unsafe.Pointer(&pinned)), pinnedBytes, portable), "cuMemHostAlloc(%d bytes)", pinnedBytes); err != nil {
		call(drv.primaryCtxRelease, d.cuDev)
		return err
	}
	d.pinned = pinned
	return nil
}

// Close releases the Device's own resources (embedded kernel modules, the
// pinned parameter buffer) and its hold on the primary context.
// Buffers, streams, events, graphs and modules the caller made should be
// released first; the driver frees them when the context goes away.
// The libraries stay loaded: unloading a driver is not safe.
func (d *Device) Close() error {
	d.hot.Lock()
	if d.closed {
		d.hot.Unlock()
		return nil
	}
	d.closed = true
	d.hot.Unlock()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	call(d.drv.ctxSetCurrent, d.ctx)
	var errs []error
	d.mu.Lock()
	for _, m := range d.kernels {
		if r := call(d.drv.moduleUnload, m.h); uint32(r) != 0 {
			errs = append(errs, d.drv.check(r, "cuModuleUnload(%s)", m.name))
		}
	}
	d.kernels = nil
	d.mu.Unlock()
	if err := d.drv.check(call(d.drv.ctxSynchronize), "cuCtxSynchronize"); err != nil {
		errs = append(errs, err)
	}
	if err := d.drv.check(call(d.drv.memFreeHost, d.pinned), "cuMemFreeHost"); err != nil {
		errs = append(errs, err)
	}
	if err := d.drv.check(call(d.drv.primaryCtxRelease, d.cuDev), "cuDevicePrimaryCtxRelease"); err != nil {
		errs = append(errs, err)
	}
	call(d.drv.ctxSetCurrent, 0)
	if len(errs) > 0 {
		return fmt.Errorf("cuda: close device %d: %w", d.ordinal, errors.Join(errs...))
	}
	return nil
}

// Name is the GPU's marketing name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// ComputeCapability is the GPU's compute capability, e.g. (9, 0) on Hopper.
func (d *Device) ComputeCapability() (major, minor int) { return d.ccMajor, d.ccMinor }

// MemoryBytes is the GPU's total memory.
func (d *Device) MemoryBytes() int64 { return d.memBytes }

// Multiprocessors is the number of streaming multiprocessors, for sizing
// persistent grids.
func (d *Device) Multiprocessors() int { return d.smCount }

// L2CacheBytes is the size of the L2 cache: benchmark inputs should be
// several times larger so that they measure memory, not the cache.
func (d *Device) L2CacheBytes() int { return d.l2Bytes }

// MaxSharedMemoryPerBlock is the opt-in shared memory limit of one block;
// a kernel gets more than 48 KiB only after Function.SetMaxDynamicSharedMemory.
func (d *Device) MaxSharedMemoryPerBlock() int { return d.sharedOptin }

// SharedMemoryPerMultiprocessor is the shared memory of one SM, shared by
// the blocks resident on it.
func (d *Device) SharedMemoryPerMultiprocessor() int { return d.sharedPerSM }

// DriverVersion is the CUDA version the driver supports, as 1000·major +
// 10·minor (13000 for CUDA 13.0).
func (d *Device) DriverVersion() int { return d.driverVersion }

// DriverPath is the file the driver library was loaded from.
func (d *Device) DriverPath() string { return d.drv.lib.path }

// FreeMemoryBytes reports the device memory currently free.
func (d *Device) FreeMemoryBytes() (int64, error) {
	var free, total uint64
	err := d.cold(func() error {
		return d.drv.check(call(d.drv.memGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))), "cuMemGetInfo")
	})
	return int64(free), err
}

// Synchronize waits until all work queued on the device has finished and
// returns the first asynchronous error, if any.
func (d *Device) Synchronize() error {
	return d.cold(func() error { return d.drv.check(call(d.drv.ctxSynchronize), "cuCtxSynchronize") })
}

// cold runs f on a locked OS thread with the primary context current. It is
// for calls that may block or allocate; it does not take the hot lock, so a
// long synchronisation does not stall launches from other goroutines.
func (d *Device) cold(f func() error) error {
	d.hot.Lock()
	closed := d.closed
	d.hot.Unlock()
	if closed {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.check(call(d.drv.ctxSetCurrent, d.ctx), "cuCtxSetCurrent"); err != nil {
		return err
	}
	return f()
}

// enterHot takes the hot lock, pins the goroutine to its thread and makes
// the context current. It returns false, having undone everything, when the
// device is closed or the context could not be made current.
func (d *Device) enterHot() bool {
	d.hot.Lock()
	if d.closed {
		d.hot.Unlock()
		return false
	}
	runtime.LockOSThread()
	d.scratch[0] = d.ctx
	if r, _, _ := purego.SyscallN(d.drv.ctxSetCurrent, d.scratch[:1]...); uint32(r) != 0 {
		runtime.UnlockOSThread()
		d.hot.Unlock()
		return false
	}
	return true
}

// leaveHot undoes enterHot.
func (d *Device) leaveHot() {
	runtime.UnlockOSThread()
	d.hot.Unlock()
}

// callHot calls fn with the first n scratch arguments; the caller holds the
// hot lock. Passing a slice of a long-lived array keeps purego.SyscallN from
// allocating; nothing in scratch points into Go memory.
func (d *Device) callHot(fn uintptr, n int) uint32 {
	r, _, _ := purego.SyscallN(fn, d.scratch[:n]...)
	return uint32(r)
}

// hotError explains why enterHot failed.
func (d *Device) hotError() error {
	d.hot.Lock()
	closed := d.closed
	d.hot.Unlock()
	if closed {
		return ErrClosed
	}
	return d.cold(func() error { return nil })
}

// pinnedView is the pinned parameter buffer as a Go slice.
func (d *Device) pinnedView() []byte {
	return unsafe.Slice((*byte)(cptr(d.pinned)), pinnedBytes)
}
