package cuda

import (
	"fmt"
	"unsafe"
)

// Module is loaded device code: a cubin, or PTX compiled by the driver.
type Module struct {
	d    *Device
	h    uintptr
	name string
	info CompileInfo
}

// Function is one kernel of a Module.
type Function struct {
	d    *Device
	h    uintptr
	name string
}

// Name is the module's name as given to Compile (the .cu file name for
// embedded kernels).
func (m *Module) Name() string { return m.name }

// Info says how the module was produced: architecture, cache hit or not.
func (m *Module) Info() CompileInfo { return m.info }

// loadModule loads a cubin or NUL-terminated PTX image.
func (d *Device) loadModule(name string, image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: load module %s: empty image", name)
	}
	var h uintptr
	err := d.cold(func() error {
		return d.drv.check(call(d.drv.moduleLoadData, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&image[0]))), "cuModuleLoadData(%s)", name)
	})
	if err != nil {
		return nil, err
	}
	return &Module{d: d, h: h, name: name}, nil
}

// Function looks up the kernel called name (an extern "C" symbol, or a
// mangled C++ name).
func (m *Module) Function(name string) (*Function, error) {
	var h uintptr
	cname := cString(name)
	err := m.d.cold(func() error {
		return m.d.drv.check(call(m.d.drv.moduleGetFunction, uintptr(unsafe.Pointer(&h)), m.h, uintptr(unsafe.Pointer(&cname[0]))),
			"cuModuleGetFunction(%s, %s)", m.name, name)
	})
	if err != nil {
		return nil, err
	}
	return &Function{d: m.d, h: h, name: name}, nil
}

// Global returns the device memory of the module's global variable called
// name (a __device__ variable, extern "C" or mangled).
func (m *Module) Global(name string) (Buffer, error) {
	var p uint64
	var n uintptr
	cname := cString(name)
	err := m.d.cold(func() error {
		return m.d.drv.check(call(m.d.drv.moduleGetGlobal, uintptr(unsafe.Pointer(&p)), uintptr(unsafe.Pointer(&n)), m.h, uintptr(unsafe.Pointer(&cname[0]))),
			"cuModuleGetGlobal_v2(%s, %s)", m.name, name)
	})
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, bytes: int(n)}, nil
}

// Close unloads the module; its Functions become invalid.
func (m *Module) Close() error {
	if m == nil || m.h == 0 {
		return nil
	}
	err := m.d.cold(func() error { return m.d.drv.check(call(m.d.drv.moduleUnload, m.h), "cuModuleUnload(%s)", m.name) })
	m.h = 0
	return err
}

// Name is the kernel's symbol name.
func (f *Function) Name() string { return f.name }

// Resources is a kernel's compiled footprint, the numbers to read before
// tuning (HOPPER.md: registers, spills, shared memory).
type Resources struct {
	Registers          int // per thread
	LocalBytes         int // per thread: spills and stack arrays; 0 is the goal
	StaticSharedBytes  int // per block
	ConstBytes         int
	MaxThreadsPerBlock int // the most a launch may ask for, given the registers
	BinaryVersion      int // SASS architecture, e.g. 90
	PTXVersion         int
}

// Resources reads the kernel's attributes (cuFuncGetAttribute).
func (f *Function) Resources() (Resources, error) {
	var r Resources
	attrs := []struct {
		attr int
		dst  *int
	}{
		{0, &r.MaxThreadsPerBlock}, {1, &r.StaticSharedBytes}, {2, &r.ConstBytes},
		{3, &r.LocalBytes}, {4, &r.Registers}, {5, &r.PTXVersion}, {6, &r.BinaryVersion},
	}
	err := f.d.cold(func() error {
		for _, a := range attrs {
			var v int32
			if err := f.d.drv.check(call(f.d.drv.funcGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), f.h), "cuFuncGetAttribute(%s, %d)", f.name, a.attr); err != nil {
				return err
			}
			*a.dst = int(v)
		}
		return nil
	})
	return r, err
}

// SetMaxDynamicSharedMemory allows launches of f with up to bytes of dynamic
// shared memory; above 48 KiB this is required before such a launch.
func (f *Function) SetMaxDynamicSharedMemory(bytes int) error {
	const attrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	return f.d.cold(func() error {
		return f.d.drv.check(call(f.d.drv.funcSetAttribute, f.h, attrMaxDynamicShared, uintptr(bytes)), "cuFuncSetAttribute(%s, max dynamic shared %d)", f.name, bytes)
	})
}

// Launch queues fn on s (nil: the legacy default stream) over grid blocks of
// block threads with sharedBytes of dynamic shared memory. The arguments are
// copied into the Device's pinned parameter buffer, from which the driver
// copies them during the call, so args may be reused at once. Launch does not
// allocate; launch-configuration errors are returned here, faults inside the
// kernel at the next synchronisation.
func (d *Device) Launch(fn *Function, grid, block [3]uint32, sharedBytes uint32, s *Stream, args *Args) error {
	if args.err != nil {
		return args.err
	}
	if t := s.recorder(); t != nil {
		t.addKernel(s, fn, grid, block, sharedBytes, args)
		return nil
	}
	if !d.enterHot() {
		return d.hotError()
	}
	pinned := d.pinnedView()
	copy(pinned[pinnedDataOff:pinnedDataOff+args.size], args.data[:args.size])
	ptrs := pinned[pinnedPtrsOff : pinnedPtrsOff+8*args.n]
	base := uint64(d.pinned) + pinnedDataOff
	for i := range args.n {
		putU64(ptrs[8*i:], base+uint64(args.off[i]))
	}
	sc := &d.scratch
	sc[0] = fn.h
	sc[1], sc[2], sc[3] = uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2])
	sc[4], sc[5], sc[6] = uintptr(block[0]), uintptr(block[1]), uintptr(block[2])
	sc[7], sc[8] = uintptr(sharedBytes), s.handle()
	sc[9], sc[10] = d.pinned+pinnedPtrsOff, 0
	r := d.callHot(d.drv.launchKernel, 11)
	d.leaveHot()
	if r != 0 {
		return d.launchError(r, fn, grid, block, sharedBytes)
	}
	return nil
}

// launchError is kept out of Launch so that its formatting does not make
// Launch's arguments escape.
//
//go:noinline
func (d *Device) launchError(r uint32, fn *Function, grid, block [3]uint32, shared uint32) error {
	return d.drv.check(uintptr(r), "cuLaunchKernel(%s, grid %v, block %v, shared %d)", fn.name, grid, block, shared)
}

// putU64 stores v little-endian (the host's order for device pointers).
func putU64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}
