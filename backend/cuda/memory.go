package cuda

import (
	"fmt"
	"unsafe"
)

// Buffer is a range of device memory: a device address and a length. It is a
// value; sub-ranges made by Slice share the allocation, and only the Buffer
// returned by Alloc may be passed to Free.
type Buffer struct {
	ptr   uint64
	bytes int
}

// Ptr is the device address of the first byte.
func (b Buffer) Ptr() uint64 { return b.ptr }

// Bytes is the length of the range.
func (b Buffer) Bytes() int { return b.bytes }

// Slice returns the sub-range [off, off+n) of b, or an error if it does not
// fit.
func (b Buffer) Slice(off, n int) (Buffer, error) {
	if off < 0 || n < 0 || off > b.bytes || n > b.bytes-off {
		return Buffer{}, fmt.Errorf("cuda: slice [%d, %d+%d) of a %d-byte buffer", off, off, n, b.bytes)
	}
	return Buffer{ptr: b.ptr + uint64(off), bytes: n}, nil
}

// Alloc reserves bytes of device memory (cuMemAlloc: 256-byte aligned,
// uninitialised). An out-of-memory failure matches ErrOutOfMemory.
func (d *Device) Alloc(bytes int) (Buffer, error) {
	if bytes <= 0 {
		return Buffer{}, fmt.Errorf("cuda: alloc %d bytes: size must be positive", bytes)
	}
	var p uint64
	err := d.cold(func() error {
		return d.drv.check(call(d.drv.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes)), "cuMemAlloc_v2(%d bytes)", bytes)
	})
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{ptr: p, bytes: bytes}, nil
}

// Free releases memory from Alloc. Freeing the zero Buffer does nothing.
func (d *Device) Free(b Buffer) error {
	if b.ptr == 0 {
		return nil
	}
	return d.cold(func() error {
		return d.drv.check(call(d.drv.memFree, uintptr(b.ptr)), "cuMemFree_v2(%#x)", b.ptr)
	})
}

// CopyToDevice copies src into the start of dst and returns once src may be
// reused. Like all synchronous Device copies it runs on the legacy default
// stream, which does not wait for work on this package's (non-blocking)
// Streams.
func (d *Device) CopyToDevice(dst Buffer, src []byte) error {
	if len(src) > dst.bytes {
		return fmt.Errorf("cuda: copy %d bytes into a %d-byte buffer", len(src), dst.bytes)
	}
	if len(src) == 0 {
		return nil
	}
	return d.cold(func() error {
		return d.drv.check(call(d.drv.memcpyHtoD, uintptr(dst.ptr), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))),
			"cuMemcpyHtoD_v2(%d bytes)", len(src))
	})
}

// CopyFromDevice copies the start of src into dst and returns when the copy
// has completed.
func (d *Device) CopyFromDevice(dst []byte, src Buffer) error {
	if len(dst) > src.bytes {
		return fmt.Errorf("cuda: copy %d bytes out of a %d-byte buffer", len(dst), src.bytes)
	}
	if len(dst) == 0 {
		return nil
	}
	return d.cold(func() error {
		return d.drv.check(call(d.drv.memcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src.ptr), uintptr(len(dst))),
			"cuMemcpyDtoH_v2(%d bytes)", len(dst))
	})
}

// CopyToDeviceF32 copies float32 values (in the host's byte order, which is
// the GPU's little-endian order on every supported host).
func (d *Device) CopyToDeviceF32(dst Buffer, src []float32) error {
	return d.CopyToDevice(dst, f32Bytes(src))
}

// CopyFromDeviceF32 copies float32 values back from the device.
func (d *Device) CopyFromDeviceF32(dst []float32, src Buffer) error {
	return d.CopyFromDevice(f32Bytes(dst), src)
}

// f32Bytes views a float32 slice as bytes without copying.
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// CopyDevice copies src into dst (device to device) and waits for it.
func (d *Device) CopyDevice(dst, src Buffer) error {
	if src.bytes > dst.bytes {
		return fmt.Errorf("cuda: copy %d bytes into a %d-byte buffer", src.bytes, dst.bytes)
	}
	if src.bytes == 0 {
		return nil
	}
	return d.cold(func() error {
		if err := d.drv.check(call(d.drv.memcpyDtoD, uintptr(dst.ptr), uintptr(src.ptr), uintptr(src.bytes)), "cuMemcpyDtoD_v2(%d bytes)", src.bytes); err != nil {
			return err
		}
		return d.drv.check(call(d.drv.streamSynchronize, 0), "cuStreamSynchronize(default stream)")
	})
}

// Memset sets every byte of b to value and waits for it.
func (d *Device) Memset(b Buffer, value byte) error {
	if b.bytes == 0 {
		return nil
	}
	return d.cold(func() error {
		if err := d.drv.check(call(d.drv.memsetD8, uintptr(b.ptr), uintptr(value), uintptr(b.bytes)), "cuMemsetD8_v2(%d bytes)", b.bytes); err != nil {
			return err
		}
		return d.drv.check(call(d.drv.streamSynchronize, 0), "cuStreamSynchronize(default stream)")
	})
}

// Memset32 sets every 4-byte word of b to value (b.Bytes() must be a multiple
// of 4) and waits for it. Use it to poison float32 outputs with a NaN pattern
// before a kernel runs.
func (d *Device) Memset32(b Buffer, value uint32) error {
	if b.bytes%4 != 0 {
		return fmt.Errorf("cuda: memset32 of %d bytes: not a multiple of 4", b.bytes)
	}
	if b.bytes == 0 {
		return nil
	}
	return d.cold(func() error {
		if err := d.drv.check(call(d.drv.memsetD32, uintptr(b.ptr), uintptr(value), uintptr(b.bytes/4)), "cuMemsetD32_v2(%d words)", b.bytes/4); err != nil {
			return err
		}
		return d.drv.check(call(d.drv.streamSynchronize, 0), "cuStreamSynchronize(default stream)")
	})
}
