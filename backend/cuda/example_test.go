package cuda_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/backend/cuda"
)

// Example shows the path a kernel takes: open the GPU (or learn there is
// none), allocate, compile an embedded kernel, launch it with typed
// arguments on a stream, and read the result back.
func Example() {
	ctx := context.Background()
	dev, err := cuda.Open(ctx, cuda.Options{})
	if errors.Is(err, cuda.ErrNoDriver) {
		fmt.Println("using the CPU:", err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()

	const n = 1 << 20
	x, _ := dev.Alloc(4 * n)
	y, _ := dev.Alloc(4 * n)
	defer dev.Free(x)
	defer dev.Free(y)
	s, _ := dev.NewStream()
	defer s.Close()
	dev.FillUniform(ctx, s, x, cuda.Float32, 1, -1, 1)
	dev.FillF32(ctx, s, y, 2)

	saxpy, err := dev.Kernel(ctx, "saxpy.cu", "saxpy_f32")
	if err != nil {
		fmt.Println(err)
		return
	}
	var a cuda.Args // y = 0.5·x + y
	a.Ptr(y)
	a.Ptr(x)
	a.F32(0.5)
	a.U64(n)
	if err := dev.Launch(saxpy, [3]uint32{n / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, &a); err != nil {
		fmt.Println(err)
		return
	}
	// Device copies do not wait for Streams: synchronise the stream first.
	if err := s.Synchronize(); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]float32, 4)
	if err := dev.CopyFromDeviceF32(out, y); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0] == 0.5*cuda.UniformAt(1, 0, -1, 1)+2)
}

// ExampleBLAS_Gemm is a linear layer y = x·Wᵀ for 8 tokens, a PyTorch
// weight W [out=1024, in=512] in bfloat16, and float32 output.
func ExampleBLAS_Gemm() {
	ctx := context.Background()
	dev, err := cuda.Open(ctx, cuda.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	blas, err := dev.NewBLAS()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer blas.Close()
	const tokens, in, out = 8, 512, 1024
	x, _ := dev.Alloc(2 * tokens * in)
	w, _ := dev.Alloc(2 * out * in)
	y, _ := dev.Alloc(4 * tokens * out)
	err = blas.Gemm(&cuda.Gemm{
		M: tokens, N: out, K: in,
		A: x, B: w, TransB: true, C: y,
		AB: cuda.BFloat16, CType: cuda.Float32,
		Alpha: 1,
	})
	fmt.Println(err)
}
