package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/nn/nntest"
)

// TestSampleKernelCompile compiles kernels/sample.cu with this machine's
// NVRTC (no GPU needed) and checks that the kernel NewNNBackend looks up
// is there.
func TestSampleKernelCompile(t *testing.T) {
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v)", err)
	}
	src, err := KernelSource("sample.cu")
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for _, a := range n.archs {
		if a <= 90 {
			best = max(best, a)
		}
	}
	ptx, err := n.build("sample.cu", src, []string{fmt.Sprintf("--gpu-architecture=compute_%d", best), "--std=c++17"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ptx), ".entry nn_sample(") {
		t.Error("no kernel nn_sample")
	}
}

// TestNNSampleBatch draws a decode batch's tokens on the GPU at the sizes
// serving meets (512 rows of Qwen's 151,936 logits, each row with its own
// parameters): every row nn.SampleRow's token or within the conformance
// tolerance of a boundary (nntest.SampleWithin), the same ids on a second
// run (the weights' sums are exact integers), and the time of a 256-row
// draw, logged against the target of about 1 ms on an H100.
func TestNNSampleBatch(t *testing.T) {
	be := nnBackend(t, Float32)
	const rows, cols = 512, 151936
	rng := rand.New(rand.NewPCG(5, 6))
	v := make([]float32, rows*cols)
	for r := range rows {
		x := v[r*cols : (r+1)*cols]
		s := 1 + 4*rng.Float64()
		for i := range x {
			x[i] = float32(rng.NormFloat64() * s)
		}
		for range 16 {
			x[rng.IntN(cols)] += float32(5 + 15*rng.Float64())
		}
		for range cols / 64 {
			x[rng.IntN(cols)] = x[rng.IntN(cols)]
		}
	}
	kinds := []nn.SampleParams{
		{Temperature: 1}, {Temperature: 0.7, TopP: 0.95}, {Temperature: 0.6, TopK: 20, TopP: 0.95},
		{Temperature: 1, TopK: 50}, {}, {Temperature: 0.8, TopP: 0.8}, {Temperature: 1.5, TopK: 5000},
	}
	p := make([]nn.SampleParams, rows)
	for r := range p {
		p[r] = kinds[r%len(kinds)]
		p[r].U = rng.Float64()
	}
	x := be.NewArena().Alloc(rows, cols)
	be.Upload(x, v)
	got, again := make([]int32, rows), make([]int32, rows)
	for i := range got {
		got[i], again[i] = -7, -7
	}
	be.Sample(got, x, p)
	be.Sample(again, x, p)
	if err := be.Err(); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		if got[r] != again[r] {
			t.Fatalf("row %d %+v: token %d, then %d on the same logits", r, p[r], got[r], again[r])
		}
	}
	want := make([]int, rows)
	var wg sync.WaitGroup
	for w := range runtime.NumCPU() {
		wg.Go(func() {
			for r := w; r < rows; r += runtime.NumCPU() {
				want[r] = nn.SampleRow(v[r*cols:(r+1)*cols], p[r])
			}
		})
	}
	wg.Wait()
	near := 0
	for r := range rows {
		g, row := int(got[r]), v[r*cols:(r+1)*cols]
		if g == want[r] {
			continue
		}
		if !nntest.SampleWithin(row, p[r], g, nntest.Float32.Sample) {
			t.Fatalf("row %d %+v: token %d, want %d\n%s", r, p[r], g, want[r], nntest.DescribeDraw(row, p[r], g, want[r]))
		}
		near++
	}
	t.Logf("%d of %d rows within the tolerance of a boundary, the rest equal", near, rows)

	half := x.Slice(0, 256)
	ids := make([]int32, 256)
	for range 3 {
		be.Sample(ids, half, p[:256])
	}
	const n = 20
	start := time.Now()
	for range n {
		be.Sample(ids, half, p[:256])
	}
	if err := be.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("256 × %d: %.3f ms a draw (with the ids' copy)", cols, float64(time.Since(start).Microseconds())/1e3/n)
}

// BenchmarkNNSample times one draw of 256 rows × 151,936 logits on the
// GPU, ids copied to the host, for the common serving settings.
func BenchmarkNNSample(b *testing.B) {
	be, err := NewNNBackend(context.Background(), gpu(b), NNOptions{Weights: Float32})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const rows, cols = 256, 151936
	rng := rand.New(rand.NewPCG(7, 8))
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 3)
	}
	x := be.NewArena().Alloc(rows, cols)
	be.Upload(x, v)
	ids := make([]int32, rows)
	for _, q := range []nn.SampleParams{
		{Temperature: 0.7, TopP: 0.95}, {Temperature: 0.6, TopK: 50, TopP: 0.95}, {Temperature: 1}, {},
	} {
		b.Run(fmt.Sprintf("T=%g,k=%d,p=%g", q.Temperature, q.TopK, q.TopP), func(b *testing.B) {
			p := make([]nn.SampleParams, rows)
			for r := range p {
				p[r] = q
				p[r].U = rng.Float64()
			}
			for b.Loop() {
				be.Sample(ids, x, p)
			}
			if err := be.Err(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
