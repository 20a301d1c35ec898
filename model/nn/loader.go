package nn

import (
	"errors"
	"fmt"
	"slices"

	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/tensor"
)

// Loader binds checkpoint tensors by name, checking their shapes: product
// weights (Matrix) in the checkpoint's format, float32 or bfloat16,
// everything else converted to float32. It keeps the first error and
// returns empty values after it, so that an architecture's binding code
// reads as a list of tensors; call Err at the end.
type Loader struct {
	src      Source
	err      error
	done     int64
	total    int64
	progress func(done, total int64)
	inPlace  bool // Matrix may return views of src's memory
}

// Source is what a Loader reads: a safetensors.Checkpoint or File, or any
// other named-tensor store. A source that also has Info(name)
// (safetensors.TensorInfo, bool) gives shapes (Shape) and sizes (progress);
// one with Dir() string names its directory (Dir).
type Source interface {
	Has(name string) bool
	Float32(name string, shape ...int) ([]float32, error)
}

type infoSource interface {
	Info(name string) (safetensors.TensorInfo, bool)
}

// viewSource is a Source that gives F32 and BF16 tensors as they are
// stored (safetensors.Checkpoint and File: views of the mapping).
type viewSource interface {
	F32(name string, shape ...int) ([]float32, error)
	BF16(name string, shape ...int) ([]uint16, error)
}

// MatrixSource is a Source that makes product weights itself, in a format
// of its choosing (random weights).
type MatrixSource interface {
	Matrix(name string, shape ...int) (tensor.Weights, error)
}

// NewLoader reads from ckpt. progress, if not nil, is called after each
// tensor with the bytes read so far and the checkpoint's total. The
// product weights it binds point into ckpt's memory-mapped files, which
// must stay open while they are used (so a bfloat16 model takes no host
// memory of its own for them, and a device backend uploads them from the
// mapping).
func NewLoader(ckpt *safetensors.Checkpoint, progress func(done, total int64)) *Loader {
	l := &Loader{src: ckpt, progress: progress, inPlace: true}
	for _, n := range ckpt.Names() {
		if info, ok := ckpt.Info(n); ok {
			l.total += info.Size
		}
	}
	return l
}

// NewSourceLoader reads from src (for example one safetensors file holding
// a model's MTP head), without progress reports. What it binds is copied
// out of src, which may be closed afterwards.
func NewSourceLoader(src Source) *Loader { return &Loader{src: src} }

// Err returns the first error met, or nil.
func (l *Loader) Err() error { return l.err }

// Fail records err (with the context of the caller) if no error came first.
func (l *Loader) Fail(err error) {
	if l.err == nil && err != nil {
		l.err = err
	}
}

// Has reports whether the checkpoint holds a tensor called name.
func (l *Loader) Has(name string) bool { return l.src.Has(name) }

// Dir is the checkpoint's directory ("" for a source without one).
func (l *Loader) Dir() string {
	if d, ok := l.src.(interface{ Dir() string }); ok {
		return d.Dir()
	}
	return ""
}

// Tensor returns the tensor called name as float32; shape, if given, must
// match (−1 matches any size).
func (l *Loader) Tensor(name string, shape ...int) []float32 {
	if l.err != nil {
		return nil
	}
	t, err := l.src.Float32(name, shape...)
	if err != nil {
		l.err = err
		return nil
	}
	if !l.read(name, tensor.Weights{F32: t}) {
		return nil
	}
	return t
}

// Matrix returns the product weights called name (shape as for Tensor) in
// the checkpoint's format: BF16 tensors as bfloat16, F32 as float32, F16
// and the FP8 formats widened to float32 (exact; bfloat16 would drop
// three of F16's mantissa bits).
func (l *Loader) Matrix(name string, shape ...int) tensor.Weights {
	if l.err != nil {
		return tensor.Weights{}
	}
	var w tensor.Weights
	var err error
	info, ok := l.info(name)
	vs, views := l.src.(viewSource)
	switch ms, made := l.src.(MatrixSource); {
	case made:
		w, err = ms.Matrix(name, shape...)
	case ok && views && info.DType == safetensors.BF16:
		w.BF16, err = vs.BF16(name, shape...)
	case ok && views && info.DType == safetensors.F32:
		w.F32, err = vs.F32(name, shape...)
	default:
		w.F32, err = l.src.Float32(name, shape...)
	}
	if err != nil {
		l.err = err
		return tensor.Weights{}
	}
	if !l.inPlace && views {
		w = tensor.Weights{F32: slices.Clone(w.F32), BF16: slices.Clone(w.BF16)}
	}
	if !l.read(name, w) {
		return tensor.Weights{}
	}
	return w
}

// read checks that tensor name's values w are finite, and counts its bytes.
func (l *Loader) read(name string, w tensor.Weights) bool {
	if i, ok := w.IsFinite(); !ok {
		// A broken checkpoint would otherwise decode garbage silently.
		l.err = fmt.Errorf("tensor %s holds a non-finite value (%v at index %d)", name, w.At(i), i)
		return false
	}
	if info, ok := l.info(name); ok {
		l.done += info.Size
	}
	if l.progress != nil {
		l.progress(l.done, l.total)
	}
	return true
}

// Shape returns the shape of the tensor called name, or nil if absent (or
// unknown: the source gives no shapes).
func (l *Loader) Shape(name string) []int {
	info, ok := l.info(name)
	if !ok {
		return nil
	}
	return info.Shape
}

func (l *Loader) info(name string) (safetensors.TensorInfo, bool) {
	if s, ok := l.src.(infoSource); ok {
		return s.Info(name)
	}
	return safetensors.TensorInfo{}, false
}

// Linear binds module's ".weight" [out][in] and, if bias, its ".bias" [out].
func (l *Loader) Linear(module string, out, in int, bias bool) Linear {
	lin := Linear{In: in, Out: out, W: l.Matrix(module+".weight", out, in)}
	if bias {
		lin.B = l.Tensor(module+".bias", out)
	}
	return lin
}

// Vector binds a 1-D tensor of n values.
func (l *Loader) Vector(name string, n int) []float32 { return l.Tensor(name, n) }

// OnePlus binds a "1+w" norm weight and returns 1+w, the factor that
// multiplies the normalised input (Qwen norms store w, initialised at 0).
func (l *Loader) OnePlus(name string, n int) []float32 {
	w := l.Tensor(name, n)
	for i := range w {
		w[i] = 1 + w[i]
	}
	return w
}

// Experts binds the per-expert projections module.experts.{e}.{proj}.weight
// [out][in] for e < n, or a fused 3-D module.experts.{proj} [n][out][in] when
// the checkpoint stores the experts that way.
func (l *Loader) Experts(module, proj string, n, out, in int) []Linear {
	ls := make([]Linear, n)
	fused := fmt.Sprintf("%s.experts.%s", module, proj)
	if l.Has(fused) || l.Has(fused+".weight") {
		name := fused
		if !l.Has(name) {
			name += ".weight"
		}
		w := l.Matrix(name, n, out, in)
		if w.Len() == 0 {
			return ls
		}
		for e := range ls {
			ls[e] = Linear{In: in, Out: out, W: w.Slice(e*out*in, (e+1)*out*in)}
		}
		return ls
	}
	for e := range ls {
		ls[e] = l.Linear(fmt.Sprintf("%s.experts.%d.%s", module, e, proj), out, in, false)
	}
	return ls
}

// FusedGateUp binds Qwen-style fused expert weights module.experts.gate_up_proj
// [n][2·inter][hidden] (gate rows first) if present, and reports whether it did.
func (l *Loader) FusedGateUp(module string, n, inter, hidden int) (gate, up []Linear, ok bool) {
	name := module + ".experts.gate_up_proj"
	if !l.Has(name) {
		return nil, nil, false
	}
	w := l.Matrix(name, n, 2*inter, hidden)
	gate, up = make([]Linear, n), make([]Linear, n)
	if w.Len() == 0 {
		return gate, up, true
	}
	sz := inter * hidden
	for e := range n {
		base := e * 2 * sz
		gate[e] = Linear{In: hidden, Out: inter, W: w.Slice(base, base+sz)}
		up[e] = Linear{In: hidden, Out: inter, W: w.Slice(base+sz, base+2*sz)}
	}
	return gate, up, true
}

// ErrNoTensor reports whether err is a missing-tensor error.
func ErrNoTensor(err error) bool { return errors.Is(err, safetensors.ErrNotFound) }

// LMHead binds d's output projection (d.Vocab, d.Hidden and d.Embed set):
// the checkpoint's lm_head.weight where it has one, else the embeddings
// when tie (tied embeddings), else an error.
func (l *Loader) LMHead(d *Decoder, tie bool) {
	switch {
	case l.Has("lm_head.weight"):
		d.LMHead = l.Linear("lm_head", d.Vocab, d.Hidden, false)
	case tie:
		d.LMHead, d.Tied = Linear{In: d.Hidden, Out: d.Vocab, W: d.Embed}, true
	default:
		l.Fail(fmt.Errorf("%s: no lm_head.weight and the embeddings are not tied", l.Dir()))
	}
}
