package cuda

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The GPU tests share one Device opened by TestMain with a fresh kernel
// cache; on a machine without a driver they skip.
var shared struct {
	dev  *Device
	err  error // Open's error when it is not ErrNoDriver
	skip string
}

// TestMain opens the shared Device with a kernel cache of its own (removed
// at the end), or the one $REPLAYSSM_KERNEL_CACHE names (kept: gpu_check.sh
// carries it from one device call to the next), and reports on stderr how
// many modules the tests compiled.
func TestMain(m *testing.M) {
	flag.Parse()
	cache, keep := os.Getenv(EnvKernelCache), true
	if cache == "" {
		var err error
		if cache, err = os.MkdirTemp("", "replayssm-kernels-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		keep = false
	}
	d, err := Open(context.Background(), Options{KernelCache: cache})
	switch {
	case errors.Is(err, ErrNoDriver):
		shared.skip = "no CUDA driver: " + err.Error()
	case err != nil:
		shared.err = err
	default:
		shared.dev = d
	}
	code := m.Run()
	if d != nil {
		fmt.Fprintln(os.Stderr, "kernels:", d.CompileStats())
		if err := d.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
	}
	if !keep {
		os.RemoveAll(cache)
	}
	os.Exit(code)
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gpu returns the shared Device, or skips the test without one.
func gpu(tb testing.TB) *Device {
	tb.Helper()
	if shared.skip != "" {
		tb.Skip(shared.skip)
	}
	if shared.err != nil {
		tb.Fatalf("Open: %v", shared.err)
	}
	return shared.dev
}

func alloc(tb testing.TB, d *Device, n int) Buffer {
	tb.Helper()
	b, err := d.Alloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := d.Free(b); err != nil {
			tb.Error(err)
		}
	})
	return b
}

func stream(tb testing.TB, d *Device) *Stream {
	tb.Helper()
	s, err := d.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func kernel(tb testing.TB, d *Device, file, entry string) *Function {
	tb.Helper()
	fn, err := d.Kernel(context.Background(), file, entry)
	if err != nil {
		tb.Fatal(err)
	}
	return fn
}

func newRand(tb testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	tb.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

func randF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return v
}

const poisonF32 = 0x7fc00000 // quiet NaN: any element left unwritten fails a comparison

func TestDeviceInfo(t *testing.T) {
	d := gpu(t)
	major, minor := d.ComputeCapability()
	t.Logf("%s: sm_%d%d, %.1f GiB, %d SMs, L2 %d MiB, opt-in shared %d KiB, driver CUDA %d.%d (%s)",
		d.Name(), major, minor, float64(d.MemoryBytes())/(1<<30), d.Multiprocessors(), d.L2CacheBytes()>>20,
		d.MaxSharedMemoryPerBlock()>>10, d.DriverVersion()/1000, d.DriverVersion()%1000/10, d.DriverPath())
	if d.Name() == "" || major < 5 || d.MemoryBytes() < 1<<30 || d.Multiprocessors() < 1 || d.L2CacheBytes() < 1<<20 {
		t.Errorf("implausible properties")
	}
	free, err := d.FreeMemoryBytes()
	if err != nil || free <= 0 || free > d.MemoryBytes() {
		t.Errorf("free memory %d, %v", free, err)
	}
	n, err := d.nvrtcLib()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d from %s, archs %v", n.major, n.minor, n.lib.path, n.archs)
	b, err := d.NewBLAS()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v, err := b.Version()
	t.Logf("cuBLAS %d from %s (%v)", v, b.api.path, err)
	if _, err := Open(context.Background(), Options{Ordinal: 1 << 20}); err == nil || errors.Is(err, ErrNoDriver) {
		t.Errorf("bad ordinal: %v", err)
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	s := stream(t, d)
	for _, n := range []int{1, 17, 4099, 1<<20 + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const pad = 64
			buf := alloc(t, d, n+2*pad)
			must(t, d.Memset(buf, 0xA5))
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			mid, err := buf.Slice(pad, n)
			must(t, err)
			must(t, d.CopyToDevice(mid, src))
			got := bytes.Repeat([]byte{0x5A}, n+2*pad)
			must(t, d.CopyFromDevice(got, buf))
			if !bytes.Equal(got[pad:pad+n], src) {
				t.Fatal("device copy differs from the source")
			}
			for i := range pad {
				if got[i] != 0xA5 || got[pad+n+i] != 0xA5 {
					t.Fatalf("bytes outside the slice changed at %d", i)
				}
			}
			// Stream-ordered copies and a device-to-device copy.
			other := alloc(t, d, n)
			must(t, s.Memset32(Buffer{ptr: other.ptr, bytes: n &^ 3}, 0xdeadbeef))
			must(t, s.CopyDevice(other, mid))
			back := make([]byte, n)
			must(t, s.CopyFromDevice(back, other))
			if !bytes.Equal(back, src) {
				t.Fatal("stream copy differs")
			}
			must(t, s.CopyToDevice(other, bytes.Repeat([]byte{7}, n)))
			must(t, d.CopyDevice(mid, other))
			must(t, d.CopyFromDevice(back, mid))
			if !bytes.Equal(back, bytes.Repeat([]byte{7}, n)) {
				t.Fatal("Device.CopyDevice differs")
			}
		})
	}
	t.Run("float32", func(t *testing.T) {
		v := randF32(rng, 12345)
		buf := alloc(t, d, 4*len(v))
		must(t, d.Memset32(buf, poisonF32))
		must(t, d.CopyToDeviceF32(buf, v))
		got := make([]float32, len(v))
		must(t, d.CopyFromDeviceF32(got, buf))
		for i := range v {
			if math.Float32bits(got[i]) != math.Float32bits(v[i]) {
				t.Fatalf("element %d: %v, want %v", i, got[i], v[i])
			}
		}
		// Memset32 writes every word.
		must(t, d.Memset32(buf, 0x3f800000))
		must(t, d.CopyFromDeviceF32(got, buf))
		for i, x := range got {
			if x != 1 {
				t.Fatalf("Memset32 element %d = %v", i, x)
			}
		}
	})
	t.Run("events order streams", func(t *testing.T) {
		s2 := stream(t, d)
		const n = 1 << 22
		a, b := alloc(t, d, n), alloc(t, d, n)
		src := bytes.Repeat([]byte{0x3c}, n)
		e, err := d.NewEvent()
		must(t, err)
		defer e.Close()
		must(t, d.Memset(b, 0))
		must(t, s.CopyToDevice(a, src))
		must(t, s.Memset32(a, 0x11223344))
		must(t, e.Record(s))
		must(t, s2.Wait(e))
		must(t, s2.CopyDevice(b, a))
		got := make([]byte, n)
		must(t, s2.CopyFromDevice(got, b))
		for i := 0; i < n; i += 4 {
			if got[i] != 0x44 || got[i+3] != 0x11 {
				t.Fatalf("byte %d = %#x: the copy did not wait for the memset", i, got[i])
			}
		}
	})
	t.Run("a priority stream forks and joins", func(t *testing.T) {
		// As launchOverlapped forks a step's flush: work on a
		// greatest-priority side stream waits for s by one untimed event,
		// and s waits for it by another.
		side, err := d.NewPriorityStream()
		must(t, err)
		defer side.Close()
		fork, err := d.NewSyncEvent()
		must(t, err)
		defer fork.Close()
		join, err := d.NewSyncEvent()
		must(t, err)
		defer join.Close()
		const n = 1 << 22
		a, b := alloc(t, d, n), alloc(t, d, n)
		must(t, d.Memset(b, 0))
		must(t, s.CopyToDevice(a, bytes.Repeat([]byte{0x3c}, n)))
		must(t, fork.Record(s))
		must(t, side.Wait(fork))
		must(t, side.Memset32(a, 0x55667788))
		must(t, join.Record(side))
		must(t, s.Wait(join))
		must(t, s.CopyDevice(b, a))
		got := make([]byte, n)
		must(t, s.CopyFromDevice(got, b))
		for i := 0; i < n; i += 4 {
			if got[i] != 0x88 || got[i+3] != 0x55 {
				t.Fatalf("byte %d = %#x: the join did not order the copy after the side stream's memset", i, got[i])
			}
		}
	})
}

func TestMemoryErrors(t *testing.T) {
	d := gpu(t)
	if _, err := d.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
	const huge = 1 << 50
	_, err := d.Alloc(huge)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Alloc(1 PiB) = %v, want ErrOutOfMemory", err)
	}
	if want := "cuda: cuMemAlloc_v2(1125899906842624 bytes): CUDA_ERROR_OUT_OF_MEMORY"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	buf := alloc(t, d, 16)
	if err := d.CopyToDevice(buf, make([]byte, 17)); err == nil {
		t.Error("overlong copy accepted")
	}
	if err := d.CopyFromDevice(make([]byte, 17), buf); err == nil {
		t.Error("overlong read accepted")
	}
	if _, err := buf.Slice(8, 9); err == nil {
		t.Error("out-of-range slice accepted")
	}
}

func TestFillKernels(t *testing.T) {
	d := gpu(t)
	ctx := context.Background()
	s := stream(t, d)
	const n = 1<<20 + 3
	seed := uint32(time.Now().UnixNano())
	buf := alloc(t, d, 4*n)

	must(t, d.Memset32(buf, poisonF32))
	must(t, d.FillUniform(ctx, s, buf, Float32, seed, -2, 3))
	must(t, s.Synchronize())
	got := make([]float32, n)
	must(t, d.CopyFromDeviceF32(got, buf))
	for i, v := range got {
		if want := UniformAt(seed, uint64(i), -2, 3); math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("fill_uniform_f32[%d] = %v, want %v (bit-exact)", i, v, want)
		}
	}

	must(t, d.Memset32(buf, 0xffffffff)) // bf16 NaN in both halves
	must(t, d.FillUniform(ctx, s, Buffer{ptr: buf.ptr, bytes: 2 * n}, BFloat16, seed, -1, 1))
	must(t, s.Synchronize())
	raw := make([]byte, 2*n)
	must(t, d.CopyFromDevice(raw, buf))
	for i := range n {
		gotBits := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		if want := bf16Bits(UniformAt(seed, uint64(i), -1, 1)); gotBits != want {
			t.Fatalf("fill_uniform_bf16[%d] = %#04x, want %#04x", i, gotBits, want)
		}
	}

	must(t, d.Memset32(buf, poisonF32))
	must(t, d.FillF32(ctx, s, buf, -3.25))
	must(t, s.Synchronize())
	must(t, d.CopyFromDeviceF32(got, buf))
	for i, v := range got {
		if v != -3.25 {
			t.Fatalf("fill_f32[%d] = %v", i, v)
		}
	}
}

// bf16Bits rounds a finite float32 to bfloat16, to nearest with ties to
// even, written independently of the kernel: the rounding adds half an ulp
// of the kept part (less one when the kept part is even).
func bf16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	keep, rest := b>>16, b&0xffff
	if rest > 0x8000 || (rest == 0x8000 && keep&1 == 1) {
		keep++
	}
	return uint16(keep)
}

func bf16Value(b uint16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }

func TestSaxpy(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	s := stream(t, d)
	fn := kernel(t, d, "saxpy.cu", "saxpy_f32")
	for _, n := range []int{1, 255, 257, 1<<20 + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const tail = 64 // canary elements after n that must stay poisoned
			x, y := randF32(rng, n), randF32(rng, n)
			alpha := rng.Float32()*4 - 2
			xb, yb := alloc(t, d, 4*n), alloc(t, d, 4*(n+tail))
			must(t, d.Memset32(yb, poisonF32))
			must(t, d.CopyToDeviceF32(xb, x))
			must(t, d.CopyToDeviceF32(yb, y))
			var a Args
			a.Ptr(yb)
			a.Ptr(xb)
			a.F32(alpha)
			a.U64(uint64(n))
			must(t, d.Launch(fn, [3]uint32{d.gridFor(uint64(n)), 1, 1}, [3]uint32{256, 1, 1}, 0, s, &a))
			must(t, s.Synchronize())
			got := make([]float32, n+tail)
			must(t, d.CopyFromDeviceF32(got, yb))
			for i := range n {
				// fmaf rounds a·x+y once; a·x is exact in float64, so the
				// float64 sum rounded to float32 may differ by one ulp
				// (double rounding) and no more.
				want := float32(float64(alpha)*float64(x[i]) + float64(y[i]))
				if !withinULP(got[i], want, 1) {
					t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
				}
			}
			for i := n; i < n+tail; i++ {
				if math.Float32bits(got[i]) != poisonF32 {
					t.Fatalf("saxpy wrote past n at %d", i)
				}
			}
		})
	}
}

func withinULP(got, want float32, ulps int) bool {
	if math.IsNaN(float64(got)) || math.IsNaN(float64(want)) {
		return false
	}
	lo, hi := want, want
	for range ulps {
		lo = math.Nextafter32(lo, float32(math.Inf(-1)))
		hi = math.Nextafter32(hi, float32(math.Inf(1)))
	}
	return got >= lo && got <= hi
}

const probeSource = `
struct Blob { int a; float b; double c; char d[8]; };
struct __align__(16) Quad { unsigned x, y, z, w; };

extern "C" __global__ void probe(unsigned long long* out, int i32, unsigned u32, long long i64,
                                 unsigned long long u64, float f32, double f64, Blob blob, int after,
                                 Quad q, const float* p)
{
    out[0] = (unsigned long long)(long long)i32;
    out[1] = u32;
    out[2] = (unsigned long long)i64;
    out[3] = u64;
    out[4] = __float_as_uint(f32);
    out[5] = (unsigned long long)__double_as_longlong(f64);
    out[6] = (unsigned long long)(long long)blob.a;
    out[7] = __float_as_uint(blob.b);
    out[8] = (unsigned long long)__double_as_longlong(blob.c);
    unsigned long long d = 0;
    for (int i = 0; i < 8; i++) d |= (unsigned long long)(unsigned char)blob.d[i] << (8 * i);
    out[9] = d;
    out[10] = (unsigned long long)(long long)after;
    out[11] = ((unsigned long long)q.y << 32) | q.x;
    out[12] = ((unsigned long long)q.w << 32) | q.z;
    out[13] = (unsigned long long)p;
    out[14] = __float_as_uint(p[0]);
}
`

func TestLaunchArgsEveryType(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	m, err := d.Compile(context.Background(), "probe.cu", probeSource)
	must(t, err)
	defer m.Close()
	fn, err := m.Function("probe")
	must(t, err)
	res, err := fn.Resources()
	must(t, err)
	major, minor := d.ComputeCapability()
	t.Logf("probe: %+v, %+v", res, m.Info())
	if res.Registers <= 0 || res.MaxThreadsPerBlock <= 0 || (m.Info().Arch[:3] == "sm_" && res.BinaryVersion != 10*major+minor) {
		t.Errorf("implausible resources %+v", res)
	}

	out := alloc(t, d, 15*8)
	p := alloc(t, d, 4)
	pv := rng.Float32()
	must(t, d.CopyToDeviceF32(p, []float32{pv}))
	i32, u32 := -int32(rng.Uint32()>>1), rng.Uint32()
	i64, u64 := -int64(rng.Uint64()>>1), rng.Uint64()
	f32, f64 := rng.Float32()-0.5, rng.NormFloat64()
	blobA, blobB, blobC := int32(rng.Uint32()), rng.Float32(), rng.Float64()
	var chars [8]byte
	for i := range chars {
		chars[i] = byte(rng.Uint32())
	}
	after := int32(rng.Uint32())
	quad := [4]uint32{rng.Uint32(), rng.Uint32(), rng.Uint32(), rng.Uint32()}

	blob := make([]byte, 24) // struct Blob: int@0, float@4, double@8, char[8]@16
	le := func(b []byte, v uint64, n int) {
		for i := range n {
			b[i] = byte(v >> (8 * i))
		}
	}
	le(blob[0:], uint64(uint32(blobA)), 4)
	le(blob[4:], uint64(math.Float32bits(blobB)), 4)
	le(blob[8:], math.Float64bits(blobC), 8)
	copy(blob[16:], chars[:])
	qb := make([]byte, 16)
	for i, v := range quad {
		le(qb[4*i:], uint64(v), 4)
	}

	var a Args
	a.Ptr(out)
	a.I32(i32)
	a.U32(u32)
	a.I64(i64)
	a.U64(u64)
	a.F32(f32)
	a.F64(f64)
	a.Bytes(blob, 8)
	a.I32(after)
	a.Bytes(qb, 16)
	a.Ptr(p)
	must(t, d.Memset(out, 0xff))
	must(t, d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, &a))
	must(t, d.Synchronize())
	raw := make([]byte, 15*8)
	must(t, d.CopyFromDevice(raw, out))
	got := make([]uint64, 15)
	for i := range got {
		for j := range 8 {
			got[i] |= uint64(raw[8*i+j]) << (8 * j)
		}
	}
	var charsWord uint64
	for i, c := range chars {
		charsWord |= uint64(c) << (8 * i)
	}
	want := []uint64{
		uint64(int64(i32)), uint64(u32), uint64(i64), u64,
		uint64(math.Float32bits(f32)), math.Float64bits(f64),
		uint64(int64(blobA)), uint64(math.Float32bits(blobB)), math.Float64bits(blobC), charsWord,
		uint64(int64(after)), uint64(quad[1])<<32 | uint64(quad[0]), uint64(quad[3])<<32 | uint64(quad[2]),
		p.Ptr(), uint64(math.Float32bits(pv)),
	}
	names := []string{"i32", "u32", "i64", "u64", "f32", "f64", "blob.a", "blob.b", "blob.c", "blob.d", "after", "quad.xy", "quad.zw", "ptr", "*ptr"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: kernel saw %#x, want %#x", names[i], got[i], want[i])
		}
	}
}

// saxpyStep queues the work of one "decode step" for the graph test: two
// dependent saxpys and a snapshot copy.
func saxpyStep(d *Device, s *Stream, fn *Function, y, x, w, snap Buffer, n int) error {
	grid, block := [3]uint32{d.gridFor(uint64(n)), 1, 1}, [3]uint32{256, 1, 1}
	var a Args
	a.Ptr(y)
	a.Ptr(x)
	a.F32(0.5)
	a.U64(uint64(n))
	if err := d.Launch(fn, grid, block, 0, s, &a); err != nil {
		return err
	}
	a.Reset() // the captured node keeps the values of the first launch
	a.Ptr(y)
	a.Ptr(w)
	a.F32(-0.25)
	a.U64(uint64(n))
	if err := d.Launch(fn, grid, block, 0, s, &a); err != nil {
		return err
	}
	return s.CopyDevice(snap, y)
}

func TestGraphReplay(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	s := stream(t, d)
	fn := kernel(t, d, "saxpy.cu", "saxpy_f32")
	const n, steps = 1<<16 + 3, 5
	x, w, y0 := randF32(rng, n), randF32(rng, n), randF32(rng, n)
	xb, wb := alloc(t, d, 4*n), alloc(t, d, 4*n)
	must(t, d.CopyToDeviceF32(xb, x))
	must(t, d.CopyToDeviceF32(wb, w))
	run := func(useGraph bool) (y, snap []float32) {
		yb, sb := alloc(t, d, 4*n), alloc(t, d, 4*n)
		must(t, d.CopyToDeviceF32(yb, y0))
		must(t, d.Memset32(sb, poisonF32))
		if !useGraph {
			for range steps {
				must(t, saxpyStep(d, s, fn, yb, xb, wb, sb, n))
			}
		} else {
			must(t, s.BeginCapture())
			must(t, saxpyStep(d, s, fn, yb, xb, wb, sb, n))
			g, err := s.EndCapture()
			must(t, err)
			defer g.Close()
			// Capturing records the work without running it.
			must(t, s.Synchronize())
			untouched := make([]float32, n)
			must(t, d.CopyFromDeviceF32(untouched, yb))
			for i := range untouched {
				if untouched[i] != y0[i] {
					t.Fatalf("capture ran the work: y[%d] changed", i)
				}
			}
			x, err := g.Instantiate()
			must(t, err)
			defer x.Close()
			must(t, x.Upload(s))
			for range steps {
				must(t, x.Launch(s))
			}
		}
		must(t, s.Synchronize())
		y, snap = make([]float32, n), make([]float32, n)
		must(t, d.CopyFromDeviceF32(y, yb))
		must(t, d.CopyFromDeviceF32(snap, sb))
		return y, snap
	}
	yDirect, snapDirect := run(false)
	yGraph, snapGraph := run(true)
	for i := range n {
		if math.Float32bits(yGraph[i]) != math.Float32bits(yDirect[i]) || math.Float32bits(snapGraph[i]) != math.Float32bits(snapDirect[i]) {
			t.Fatalf("element %d: graph %v/%v, direct %v/%v", i, yGraph[i], snapGraph[i], yDirect[i], snapDirect[i])
		}
		// Each step adds 0.5x − 0.25w with float32 rounding: 10 roundings
		// of values below 4 stay far below 1e-5.
		want := float64(y0[i]) + steps*(0.5*float64(x[i])-0.25*float64(w[i]))
		if math.Abs(float64(yGraph[i])-want) > 1e-5 || yGraph[i] != snapGraph[i] {
			t.Fatalf("element %d: %v (snapshot %v), want %v", i, yGraph[i], snapGraph[i], want)
		}
	}
}

const spinSource = `
extern "C" __global__ void spin(unsigned long long ns, unsigned long long* out)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = t - t0;
}
`

func TestEventTiming(t *testing.T) {
	d := gpu(t)
	s := stream(t, d)
	m, err := d.Compile(context.Background(), "spin.cu", spinSource)
	must(t, err)
	defer m.Close()
	fn, err := m.Function("spin")
	must(t, err)
	out := alloc(t, d, 8)
	spin := func(dur time.Duration) error {
		var a Args
		a.U64(uint64(dur.Nanoseconds()))
		a.Ptr(out)
		return d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, &a)
	}
	must(t, spin(time.Millisecond)) // warm up
	start, end := mustEvent(t, d), mustEvent(t, d)
	const want = 2 * time.Millisecond
	host := time.Now()
	must(t, start.Record(s))
	must(t, spin(want))
	must(t, end.Record(s))
	must(t, end.Synchronize())
	hostDur := time.Since(host)
	got, err := end.Since(start)
	must(t, err)
	t.Logf("2 ms spin: events %v, host %v", got, hostDur)
	if got < want*95/100 || got > 10*want {
		t.Errorf("events measured %v for a %v spin", got, want)
	}
	if hostDur < got*9/10 {
		t.Errorf("host saw %v, less than the device's %v", hostDur, got)
	}

	timer, err := d.NewTimer(s)
	must(t, err)
	defer timer.Close()
	tm, err := timer.Median(context.Background(), 7, func() error { return spin(500 * time.Microsecond) })
	must(t, err)
	t.Logf("0.5 ms spin x7: %+v", tm)
	if tm.Median < 475*time.Microsecond || tm.Median > 5*time.Millisecond || tm.Min > tm.Median || tm.Max < tm.Median || tm.Runs != 7 {
		t.Errorf("timer: %+v", tm)
	}
}

func mustEvent(t *testing.T, d *Device) *Event {
	e, err := d.NewEvent()
	must(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func TestKernelCache(t *testing.T) {
	gpu(t)
	cache := t.TempDir()
	d, err := Open(context.Background(), Options{KernelCache: cache})
	must(t, err)
	ctx := context.Background()
	src, err := KernelSource("saxpy.cu")
	must(t, err)
	src += fmt.Sprintf("\n// nonce %d\n", time.Now().UnixNano())

	m1, err := d.Compile(ctx, "saxpy.cu", src)
	must(t, err)
	i1 := m1.Info()
	t.Logf("first compile: %+v", i1)
	if i1.CacheHit || i1.Compile <= 0 || i1.CacheErr != nil || !strings.HasPrefix(i1.CachePath, cache) {
		t.Errorf("first compile info %+v", i1)
	}
	if _, err := os.Stat(i1.CachePath); err != nil {
		t.Fatalf("cache file: %v", err)
	}
	m2, err := d.Compile(ctx, "saxpy.cu", src)
	must(t, err)
	if i2 := m2.Info(); !i2.CacheHit || i2.CachePath != i1.CachePath || i2.Compile != 0 {
		t.Errorf("second compile info %+v, want a cache hit", i2)
	}
	if _, err := m2.Function("saxpy_f32"); err != nil {
		t.Errorf("cached module: %v", err)
	}
	m3, err := d.Compile(ctx, "saxpy.cu", src, "-DVARIANT=1")
	must(t, err)
	if m3.Info().CacheHit || m3.Info().CachePath == i1.CachePath {
		t.Errorf("different options hit the same entry: %+v", m3.Info())
	}
	// A damaged entry is rebuilt, not trusted.
	must(t, os.WriteFile(i1.CachePath, []byte("garbage"), 0o644))
	m4, err := d.Compile(ctx, "saxpy.cu", src)
	must(t, err)
	if m4.Info().CacheHit {
		t.Error("garbage cache entry reported as a hit")
	}
	if st, err := os.Stat(i1.CachePath); err != nil || st.Size() <= int64(len("garbage")) {
		t.Errorf("damaged entry not rewritten: %v", err)
	}
	// Callers asking for one new image at once share one NVRTC run: one
	// compiles, the others join it (or, arriving after it, hit the
	// cache), and each gets a module of its own.
	src5 := src + "// concurrent\n"
	before := d.CompileStats()
	const callers = 8
	ms := make([]*Module, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { ms[i], errs[i] = d.Compile(ctx, "saxpy.cu", src5) })
	}
	wg.Wait()
	compiled := 0
	for i, m := range ms {
		must(t, errs[i])
		info := m.Info()
		if info.Compile > 0 {
			compiled++
		}
		if n := btoi(info.Compile > 0) + btoi(info.Joined) + btoi(info.CacheHit); n != 1 {
			t.Errorf("caller %d: %+v: want exactly one of compiled, joined, cache hit", i, info)
		}
		if _, err := m.Function("saxpy_f32"); err != nil {
			t.Errorf("caller %d's module: %v", i, err)
		}
		must(t, m.Close())
	}
	after := d.CompileStats()
	if compiled != 1 || after.Compiled-before.Compiled != 1 || after.Joined+after.FromCache-before.Joined-before.FromCache != callers-1 {
		t.Errorf("%d callers: %d compiled (stats %v -> %v), want 1", callers, compiled, before, after)
	}
	for _, m := range []*Module{m1, m2, m3, m4} {
		must(t, m.Close())
	}
	must(t, d.Close())
	must(t, d.Close()) // idempotent
	if _, err := d.Alloc(16); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
	var a Args
	if err := d.Launch(&Function{}, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, &a); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch after Close: %v", err)
	}
}

func TestCompileError(t *testing.T) {
	d := gpu(t)
	src := "extern \"C\" __global__ void bad(float* y) { y[0] = undefined_thing_42; }\n"
	_, err := d.Compile(context.Background(), "bad.cu", src)
	if err == nil {
		t.Fatal("bad source compiled")
	}
	var e *Error
	if !errors.As(err, &e) || e.Name != "NVRTC_ERROR_COMPILATION" {
		t.Fatalf("error %v (%T), want an NVRTC_ERROR_COMPILATION *Error", err, err)
	}
	if !strings.Contains(e.Log, "undefined_thing_42") || !strings.Contains(err.Error(), "undefined_thing_42") {
		t.Errorf("the log is not in the error: %q", err)
	}
	t.Logf("%v", err)
}

// gemmCase is one GEMM checked against a float64 reference.
type gemmCase struct {
	name           string
	m, n, k        int
	ab, c          DataType
	transA, transB bool
	alpha, beta    float32
}

func (g gemmCase) tolerance() float64 {
	// Normwise relative error ‖got − ref‖/‖ref‖ with the reference computed
	// from the exact inputs the device saw. float32 accumulation over K ≤ 1000
	// terms errs about √K·2⁻²⁴ ≈ 2e-6: bound 1e-5. A bfloat16 OUTPUT is
	// rounded to 8 significant bits, 2⁻⁹ ≈ 2e-3 relative per element: bound
	// 1e-2.
	if g.c == BFloat16 {
		return 1e-2
	}
	return 1e-5
}

func TestGemm(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	s := stream(t, d)
	b, err := d.NewBLAS()
	must(t, err)
	defer b.Close()
	must(t, b.SetStream(s))
	tests := []gemmCase{
		{"fp32 NN", 67, 129, 95, Float32, Float32, false, false, 1, 0},
		{"fp32 TN", 67, 129, 95, Float32, Float32, true, false, 1, 0},
		{"fp32 NT", 67, 129, 95, Float32, Float32, false, true, -0.5, 0},
		{"fp32 TT", 67, 129, 95, Float32, Float32, true, true, 1, 0},
		{"fp32 beta", 40, 33, 200, Float32, Float32, false, true, 0.75, -1.25},
		{"fp32 one token", 1, 300, 1000, Float32, Float32, false, true, 1, 0},
		{"bf16→fp32 linear", 33, 257, 512, BFloat16, Float32, false, true, 1, 0},
		{"bf16→fp32 NN beta", 64, 96, 128, BFloat16, Float32, false, false, 2, 0.5},
		{"bf16→bf16", 64, 96, 128, BFloat16, BFloat16, false, true, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkGemm(t, d, b, s, rng, tt) })
	}
}

// hostMatrix is a matrix's device bytes and the exact values they encode.
type hostMatrix struct {
	raw  []byte
	vals []float64
}

func makeMatrix(rng *rand.Rand, n int, t DataType) hostMatrix {
	m := hostMatrix{raw: make([]byte, n*t.Size()), vals: make([]float64, n)}
	for i := range n {
		f := rng.Float32()*2 - 1
		if t == BFloat16 {
			bits := bf16Bits(f)
			m.raw[2*i], m.raw[2*i+1] = byte(bits), byte(bits>>8)
			m.vals[i] = bf16Value(bits)
		} else {
			bits := math.Float32bits(f)
			for j := range 4 {
				m.raw[4*i+j] = byte(bits >> (8 * j))
			}
			m.vals[i] = float64(f)
		}
	}
	return m
}

func readMatrix(raw []byte, t DataType) []float64 {
	out := make([]float64, len(raw)/t.Size())
	for i := range out {
		if t == BFloat16 {
			out[i] = bf16Value(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8)
		} else {
			out[i] = float64(math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24))
		}
	}
	return out
}

func checkGemm(t *testing.T, d *Device, b *BLAS, s *Stream, rng *rand.Rand, tt gemmCase) {
	A := makeMatrix(rng, tt.m*tt.k, tt.ab)
	B := makeMatrix(rng, tt.k*tt.n, tt.ab)
	C := makeMatrix(rng, tt.m*tt.n, tt.c)
	ab, bb, cb := alloc(t, d, len(A.raw)), alloc(t, d, len(B.raw)), alloc(t, d, len(C.raw))
	must(t, d.CopyToDevice(ab, A.raw))
	must(t, d.CopyToDevice(bb, B.raw))
	if tt.beta == 0 {
		must(t, d.Memset(cb, 0xff)) // NaN in either type; beta = 0 must not read C
	} else {
		must(t, d.CopyToDevice(cb, C.raw))
	}
	g := Gemm{M: tt.m, N: tt.n, K: tt.k, A: ab, B: bb, C: cb, TransA: tt.transA, TransB: tt.transB,
		AB: tt.ab, CType: tt.c, Alpha: tt.alpha, Beta: tt.beta}
	must(t, b.Gemm(&g))
	must(t, s.Synchronize())
	raw := make([]byte, len(C.raw))
	must(t, d.CopyFromDevice(raw, cb))
	got := readMatrix(raw, tt.c)

	// Reference in float64: A is stored M×K (K×M if TransA), B K×N (N×K if
	// TransB), all row-major and tightly packed.
	var num, den float64
	for i := range tt.m {
		for j := range tt.n {
			var sum float64
			for l := range tt.k {
				var a, bv float64
				if tt.transA {
					a = A.vals[l*tt.m+i]
				} else {
					a = A.vals[i*tt.k+l]
				}
				if tt.transB {
					bv = B.vals[j*tt.k+l]
				} else {
					bv = B.vals[l*tt.n+j]
				}
				sum += a * bv
			}
			ref := float64(tt.alpha)*sum + float64(tt.beta)*C.vals[i*tt.n+j]
			v := got[i*tt.n+j]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("C[%d,%d] = %v: not written", i, j, v)
			}
			num += (v - ref) * (v - ref)
			den += ref * ref
		}
	}
	rel := math.Sqrt(num / den)
	t.Logf("%dx%dx%d: relative error %.2e (bound %.0e)", tt.m, tt.n, tt.k, rel, tt.tolerance())
	if rel > tt.tolerance() {
		t.Errorf("relative error %.3e exceeds %.0e", rel, tt.tolerance())
	}
}

func TestGemmInGraph(t *testing.T) {
	d := gpu(t)
	s := stream(t, d)
	ctx := context.Background()
	b, err := d.NewBLAS()
	must(t, err)
	defer b.Close()
	must(t, b.SetStream(s))
	const m, n, k = 128, 256, 512
	ab, bb := alloc(t, d, 2*m*k), alloc(t, d, 2*n*k)
	c1, c2 := alloc(t, d, 4*m*n), alloc(t, d, 4*m*n)
	must(t, d.FillUniform(ctx, s, ab, BFloat16, 11, -1, 1))
	must(t, d.FillUniform(ctx, s, bb, BFloat16, 12, -1, 1))
	g := Gemm{M: m, N: n, K: k, A: ab, B: bb, C: c1, TransB: true, AB: BFloat16, Alpha: 1}
	must(t, b.Gemm(&g))
	must(t, s.Memset32(c2, poisonF32))
	must(t, s.BeginCapture())
	g.C = c2
	must(t, b.Gemm(&g))
	graph, err := s.EndCapture()
	must(t, err)
	defer graph.Close()
	x, err := graph.Instantiate()
	must(t, err)
	defer x.Close()
	must(t, x.Launch(s))
	must(t, s.Synchronize())
	r1, r2 := make([]byte, 4*m*n), make([]byte, 4*m*n)
	must(t, d.CopyFromDevice(r1, c1))
	must(t, d.CopyFromDevice(r2, c2))
	// The same call on the same stream normally picks the same algorithm,
	// hence the same bits; allow rounding-level differences in case the
	// capture path picks another.
	got, replay := readMatrix(r1, Float32), readMatrix(r2, Float32)
	for i := range got {
		if math.IsNaN(replay[i]) || math.Abs(got[i]-replay[i]) > 1e-5*math.Sqrt(k) {
			t.Fatalf("graph GEMM C[%d] = %v, direct %v", i, replay[i], got[i])
		}
	}
	t.Logf("graph replay bit-identical to the direct GEMM: %v", bytes.Equal(r1, r2))
	// Spot-check the direct result against the float64 reference.
	for _, ij := range [][2]int{{0, 0}, {m - 1, n - 1}, {37, 101}} {
		var ref float64
		for l := range k {
			ref += bf16Value(bf16Bits(UniformAt(11, uint64(ij[0]*k+l), -1, 1))) * bf16Value(bf16Bits(UniformAt(12, uint64(ij[1]*k+l), -1, 1)))
		}
		if v := got[ij[0]*n+ij[1]]; math.Abs(v-ref) > 1e-4*math.Sqrt(k) {
			t.Errorf("C%v = %v, want %v", ij, v, ref)
		}
	}
}

// TestHotPathAllocs asserts that the calls a decode step repeats do not
// allocate (STYLE.md: allocation budgets on hot paths).
func TestHotPathAllocs(t *testing.T) {
	d := gpu(t)
	s := stream(t, d)
	fn := kernel(t, d, "saxpy.cu", "saxpy_f32")
	const n = 4096
	y, x := alloc(t, d, 4*n), alloc(t, d, 4*n)
	must(t, d.Memset32(y, 0))
	must(t, d.Memset32(x, 0x3f800000))
	grid, block := [3]uint32{16, 1, 1}, [3]uint32{256, 1, 1}
	launch := func() {
		var a Args // built per launch, as call sites do
		a.Ptr(y)
		a.Ptr(x)
		a.F32(1)
		a.U64(n)
		if err := d.Launch(fn, grid, block, 0, s, &a); err != nil {
			panic(err)
		}
	}
	must(t, s.BeginCapture())
	launch()
	graph, err := s.EndCapture()
	must(t, err)
	defer graph.Close()
	exec, err := graph.Instantiate()
	must(t, err)
	defer exec.Close()
	e := mustEvent(t, d)
	b, err := d.NewBLAS()
	must(t, err)
	defer b.Close()
	must(t, b.SetStream(s))
	gm := Gemm{M: 32, N: 32, K: 32, A: x, B: x, C: y, Alpha: 1}

	const runs = 200
	tests := []struct {
		name string
		f    func()
	}{
		{"Launch", launch},
		{"GraphExec.Launch", func() {
			if err := exec.Launch(s); err != nil {
				panic(err)
			}
		}},
		{"Event.Record", func() {
			if err := e.Record(s); err != nil {
				panic(err)
			}
		}},
		{"Stream.Wait", func() {
			if err := s.Wait(e); err != nil {
				panic(err)
			}
		}},
		{"BLAS.Gemm", func() {
			if err := b.Gemm(&gm); err != nil {
				panic(err)
			}
		}},
	}
	for _, tt := range tests {
		if allocs := testing.AllocsPerRun(runs, tt.f); allocs != 0 {
			t.Errorf("%s allocates %v times per call", tt.name, allocs)
		}
	}
	must(t, s.Synchronize())
	// The launches really ran: y = Σ x over 2·(runs+1) saxpys (+ GEMM
	// writes over the first 32×32 floats, left out of the check).
	got := make([]float32, n)
	must(t, d.CopyFromDeviceF32(got, y))
	if v := got[n-1]; v != 2*(runs+1) {
		t.Errorf("y[n-1] = %v, want %d", v, 2*(runs+1))
	}
}

func TestCopyKernel(t *testing.T) {
	d := gpu(t)
	fn := kernel(t, d, "copy.cu", "copy16")
	res, err := fn.Resources()
	must(t, err)
	t.Logf("copy16 resources: %+v", res)
	if res.LocalBytes != 0 {
		t.Errorf("copy16 spills: %d local bytes per thread", res.LocalBytes)
	}
	checkCopy16(t, d, fn, copyUnroll, copyThreads, newRand(t))
}

// checkCopy16 runs a copy16 variant over a size with a partial last block
// and checks every byte, and that nothing past the end was written.
func checkCopy16(t *testing.T, d *Device, fn *Function, unroll, threads int, rng *rand.Rand) {
	t.Helper()
	const n16 = 1000*1024 + 7
	src := make([]byte, 16*n16)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	sb, db := alloc(t, d, len(src)), alloc(t, d, len(src)+256)
	must(t, d.CopyToDevice(sb, src))
	must(t, d.Memset(db, 0xA5))
	grid, block, a, err := copyLaunch(db, sb, unroll, threads)
	must(t, err)
	must(t, d.Launch(fn, grid, block, 0, nil, a))
	must(t, d.Synchronize())
	got := make([]byte, len(src)+256)
	must(t, d.CopyFromDevice(got, db))
	if !bytes.Equal(got[:len(src)], src) {
		t.Fatalf("copy16 (unroll %d, %d threads) result differs", unroll, threads)
	}
	for i, v := range got[len(src):] {
		if v != 0xA5 {
			t.Fatalf("copy16 (unroll %d, %d threads) wrote past the end at +%d", unroll, threads, i)
		}
	}
}

func TestCopyBandwidth(t *testing.T) {
	d := gpu(t)
	size := 1 << 30
	if testing.Short() {
		size = 256 << 20
	}
	m, err := d.measureCopy(context.Background(), size)
	must(t, err)
	moved := int64(2 * m.bytes)
	t.Logf("copy %d MiB, read+write: cuMemcpyDtoD %.0f GB/s (median %v, min %v, max %v); copy16 kernel %.0f GB/s (median %v, min %v, max %v); read16, read only: %.0f GB/s (median %v, min %v, max %v)",
		m.bytes>>20, m.driver.GBps(moved), m.driver.Median, m.driver.Min, m.driver.Max,
		m.kernel.GBps(moved), m.kernel.Median, m.kernel.Min, m.kernel.Max,
		m.read.GBps(int64(m.bytes)), m.read.Median, m.read.Min, m.read.Max)
	gbps, read, err := d.MeasureBandwidth(context.Background(), size)
	must(t, err)
	t.Logf("MeasureBandwidth: copy %.0f GB/s, read %.0f GB/s", gbps, read)
	if gbps < 100 || read < 100 {
		t.Errorf("copy bandwidth %.0f GB/s or read bandwidth %.0f GB/s is implausibly low", gbps, read)
	}
}

// TestGemmThroughput measures the matrix ceiling METHOD.md asks for.
func TestGemmThroughput(t *testing.T) {
	d := gpu(t)
	if testing.Short() {
		t.Skip("slow")
	}
	ctx := context.Background()
	s := stream(t, d)
	b, err := d.NewBLAS()
	must(t, err)
	defer b.Close()
	must(t, b.SetStream(s))
	timer, err := d.NewTimer(s)
	must(t, err)
	defer timer.Close()
	tests := []struct {
		name   string
		size   int
		ab, c  DataType
		tf32   bool
		transB bool
	}{
		{"bf16→fp32 NT", 8192, BFloat16, Float32, false, true},
		{"bf16→bf16 NN", 8192, BFloat16, BFloat16, false, false},
		{"fp32", 4096, Float32, Float32, false, false},
		{"fp32 tf32", 4096, Float32, Float32, true, false},
	}
	for _, tt := range tests {
		n := tt.size
		ab, bb := alloc(t, d, n*n*tt.ab.Size()), alloc(t, d, n*n*tt.ab.Size())
		cb := alloc(t, d, n*n*tt.c.Size())
		must(t, d.FillUniform(ctx, s, ab, tt.ab, 1, -1, 1))
		must(t, d.FillUniform(ctx, s, bb, tt.ab, 2, -1, 1))
		g := Gemm{M: n, N: n, K: n, A: ab, B: bb, C: cb, TransB: tt.transB, AB: tt.ab, CType: tt.c, Alpha: 1, TF32: tt.tf32}
		tm, err := timer.Median(ctx, 10, func() error { return b.Gemm(&g) })
		must(t, err)
		tflops := 2 * float64(n) * float64(n) * float64(n) / tm.Median.Seconds() / 1e12
		t.Logf("GEMM %s %d³: %.1f TFLOP/s (median %v, min %v, max %v)", tt.name, n, tflops, tm.Median, tm.Min, tm.Max)
	}
}

// Benchmarks of the host-side cost of the hot path; ns/op on an idle GPU
// is bounded below by the launch rate of the device.

func BenchmarkLaunch(b *testing.B) {
	d := gpu(b)
	s := stream(b, d)
	m, err := d.Compile(context.Background(), "empty.cu", `extern "C" __global__ void empty(int x) {}`)
	must(b, err)
	defer m.Close()
	fn, err := m.Function("empty")
	must(b, err)
	var a Args
	a.I32(1)
	for b.Loop() {
		if err := d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, &a); err != nil {
			b.Fatal(err)
		}
	}
	must(b, s.Synchronize())
}

func BenchmarkGraphLaunch(b *testing.B) {
	d := gpu(b)
	s := stream(b, d)
	m, err := d.Compile(context.Background(), "empty.cu", `extern "C" __global__ void empty(int x) {}`)
	must(b, err)
	defer m.Close()
	fn, err := m.Function("empty")
	must(b, err)
	var a Args
	a.I32(1)
	must(b, s.BeginCapture())
	for range 10 { // a "step" of 10 small kernels
		must(b, d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, &a))
	}
	g, err := s.EndCapture()
	must(b, err)
	defer g.Close()
	x, err := g.Instantiate()
	must(b, err)
	defer x.Close()
	for b.Loop() {
		if err := x.Launch(s); err != nil {
			b.Fatal(err)
		}
	}
	must(b, s.Synchronize())
}

func BenchmarkLaunchSync(b *testing.B) {
	d := gpu(b)
	s := stream(b, d)
	m, err := d.Compile(context.Background(), "empty.cu", `extern "C" __global__ void empty(int x) {}`)
	must(b, err)
	defer m.Close()
	fn, err := m.Function("empty")
	must(b, err)
	var a Args
	a.I32(1)
	for b.Loop() {
		if err := d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, &a); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotEnter is this package's own cost per hot call: the mutex,
// LockOSThread and cuCtxSetCurrent (see the package doc on threads).
func BenchmarkHotEnter(b *testing.B) {
	d := gpu(b)
	for b.Loop() {
		if !d.enterHot() {
			b.Fatal(d.hotError())
		}
		d.leaveHot()
	}
}

// BenchmarkLaunchHost is the host-side cost of one launch while the
// device's queue has room: the timer stops while the queue drains every 64
// launches.
func BenchmarkLaunchHost(b *testing.B) {
	d := gpu(b)
	s := stream(b, d)
	m, err := d.Compile(context.Background(), "empty.cu", `extern "C" __global__ void empty(int x) {}`)
	must(b, err)
	defer m.Close()
	fn, err := m.Function("empty")
	must(b, err)
	var a Args
	a.I32(1)
	i := 0
	for b.Loop() {
		if err := d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, &a); err != nil {
			b.Fatal(err)
		}
		if i++; i%64 == 0 {
			b.StopTimer()
			must(b, s.Synchronize())
			b.StartTimer()
		}
	}
	must(b, s.Synchronize())
}

func BenchmarkEventRecord(b *testing.B) {
	d := gpu(b)
	s := stream(b, d)
	e, err := d.NewEvent()
	must(b, err)
	defer e.Close()
	for b.Loop() {
		if err := e.Record(s); err != nil {
			b.Fatal(err)
		}
	}
	must(b, s.Synchronize())
}

// closeAfter closes c when the test ends, reporting an error without
// stopping the test, so that a panic in the test is not hidden by a Close
// that fails because of it.
func closeAfter(tb testing.TB, c interface{ Close() error }) {
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
}
