package cuda

import (
	"context"
	"embed"
	"fmt"
)

// kernelSources are the package's CUDA C++ files, compiled at first use.
//
//go:embed kernels/*.cu
var kernelSources embed.FS

// KernelSource returns the text of an embedded kernel file, e.g. "copy.cu".
func KernelSource(file string) (string, error) {
	b, err := kernelSources.ReadFile("kernels/" + file)
	if err != nil {
		return "", fmt.Errorf("cuda: embedded kernel %s: %w", file, err)
	}
	return string(b), nil
}

// Kernel returns function entry of the embedded kernel file (kernels/file),
// compiling the file on its first use on this Device (NVRTC, disk cache) and
// keeping the module loaded until Close.
func (d *Device) Kernel(ctx context.Context, file, entry string) (*Function, error) {
	m, err := d.kernelModule(ctx, file)
	if err != nil {
		return nil, err
	}
	return m.Function(entry)
}

func (d *Device) kernelModule(ctx context.Context, file string) (*Module, error) {
	d.mu.Lock()
	if d.kernels == nil {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	m := d.kernels[file]
	d.mu.Unlock()
	if m != nil {
		return m, nil
	}
	src, err := KernelSource(file)
	if err != nil {
		return nil, err
	}
	m, err = d.Compile(ctx, file, src)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kernels == nil {
		m.Close()
		return nil, ErrClosed
	}
	if prev := d.kernels[file]; prev != nil {
		// Another goroutine compiled it meanwhile; keep one copy.
		m.Close()
		return prev, nil
	}
	d.kernels[file] = m
	return m, nil
}

// gridFor is the block count of a grid-stride launch of 256-thread blocks
// over n elements: enough blocks to cover n, capped at 32 per multiprocessor.
func (d *Device) gridFor(n uint64) uint32 {
	blocks := (n + 255) / 256
	limit := uint64(32 * max(d.smCount, 1))
	return uint32(max(min(blocks, limit), 1))
}

// FillUniform queues on s the filling of b with pseudo-random values in
// [lo, hi): element i is UniformAt(seed, i, lo, hi), as float32 or rounded to
// bfloat16 (t is Float32 or BFloat16). Whole elements only.
func (d *Device) FillUniform(ctx context.Context, s *Stream, b Buffer, t DataType, seed uint32, lo, hi float32) error {
	var entry string
	switch t {
	case Float32:
		entry = "fill_uniform_f32"
	case BFloat16:
		entry = "fill_uniform_bf16"
	default:
		return fmt.Errorf("cuda: FillUniform: unsupported type %v", t)
	}
	fn, err := d.Kernel(ctx, "fill.cu", entry)
	if err != nil {
		return err
	}
	n := uint64(b.bytes / t.Size())
	var a Args
	a.Ptr(b)
	a.U64(n)
	a.U32(seed)
	a.F32(lo)
	a.F32(hi)
	return d.Launch(fn, [3]uint32{d.gridFor(n), 1, 1}, [3]uint32{256, 1, 1}, 0, s, &a)
}

// FillF32 queues on s the setting of every float32 of b to v (NaN poisons
// an output before a kernel under test writes it).
func (d *Device) FillF32(ctx context.Context, s *Stream, b Buffer, v float32) error {
	fn, err := d.Kernel(ctx, "fill.cu", "fill_f32")
	if err != nil {
		return err
	}
	n := uint64(b.bytes / 4)
	var a Args
	a.Ptr(b)
	a.F32(v)
	a.U64(n)
	return d.Launch(fn, [3]uint32{d.gridFor(n), 1, 1}, [3]uint32{256, 1, 1}, 0, s, &a)
}

// hash32 mirrors fill.cu's hash32 ("lowbias32").
func hash32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// UniformAt is element i of FillUniform's stream for seed, bit-identical to
// the device's float32 value, so host references can be computed without
// copying inputs back.
func UniformAt(seed uint32, i uint64, lo, hi float32) float32 {
	h := hash32(uint32(i) ^ hash32(seed+uint32(i>>32)))
	u := float32(h>>8) * (1.0 / 16777216.0)
	// The conversion rounds the product before the add, as __fmul_rn does:
	// Go may otherwise fuse the two into one multiply-add.
	return lo + float32((hi-lo)*u)
}
