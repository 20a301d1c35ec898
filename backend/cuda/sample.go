package cuda

import (
	"context"
	"math"
	"unsafe"

	"github.com/replayssm/replayssm/model/nn"
)

// opSample names Sample in the backend's profile, with the ids' copy to
// the host.
const opSample = "sample"

// sampleThreads is kernels/sample.cu's SAMPLE_THREADS: one block a row.
const sampleThreads = 1024

// rowSampler is the backend's sampling kernel and the host staging of its
// parameters.
type rowSampler struct {
	fn     *Function
	params []uint32
}

func loadSampler(ctx context.Context, d *Device) (rowSampler, error) {
	fn, err := d.Kernel(ctx, "sample.cu", "nn_sample")
	return rowSampler{fn: fn}, err
}

// Sample draws each row's token on the device as nn.SampleRow defines it
// (kernels/sample.cu: the same kept sets and draws, up to the weights'
// float32 rounding near a boundary), and copies only the ids to dst.
func (b *NNBackend) Sample(dst []int32, x nn.Tensor, p []nn.SampleParams) {
	if b.err != nil || x.Rows == 0 {
		return
	}
	defer b.span(opSample)()
	ids := b.scratch(&b.ids, 4*x.Rows)
	w := b.sampler.params[:0]
	for _, q := range p[:x.Rows] { // sample.cu's SampleParam, little-endian
		u := math.Float64bits(q.U)
		w = append(w, math.Float32bits(q.Temperature), math.Float32bits(q.TopP), uint32(q.TopK), 0, uint32(u), uint32(u>>32))
	}
	b.sampler.params = w
	params := b.list(unsafe.Pointer(&w[0]), len(w))
	a := &b.args
	a.Reset()
	a.Ptr(ids)
	b.tensorArg(x)
	a.I32(int32(x.Cols))
	a.Ptr(params)
	b.launch(b.sampler.fn, [3]uint32{uint32(x.Rows), 1, 1}, sampleThreads)
	if b.err == nil {
		b.fail(b.s.CopyFromDevice(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*x.Rows), ids))
	}
}
