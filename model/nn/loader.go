package nn

import (
	"errors"
	"fmt"
	"math"

	"github.com/replayssm/replayssm/model/safetensors"
)

// Loader binds checkpoint tensors by name, converting them to float32 and
// checking their shapes. It keeps the first error and returns empty values
// after it, so that an architecture's binding code reads as a list of
// tensors; call Err at the end.
type Loader struct {
	src      Source
	err      error
	done     int64
	total    int64
	progress func(done, total int64)
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

// NewLoader reads from ckpt. progress, if not nil, is called after each
// tensor with the bytes read so far and the checkpoint's total.
func NewLoader(ckpt *safetensors.Checkpoint, progress func(done, total int64)) *Loader {
	l := &Loader{src: ckpt, progress: progress}
	for _, n := range ckpt.Names() {
		if info, ok := ckpt.Info(n); ok {
			l.total += info.Size
		}
	}
	return l
}

// NewSourceLoader reads from src (for example one safetensors file holding
// a model's MTP head), without progress reports.
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
	for i, v := range t {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			// A broken checkpoint would otherwise decode garbage silently.
			l.err = fmt.Errorf("tensor %s holds a non-finite value (%v at index %d)", name, v, i)
			return nil
		}
	}
	if info, ok := l.info(name); ok {
		l.done += info.Size
	}
	if l.progress != nil {
		l.progress(l.done, l.total)
	}
	return t
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
	lin := Linear{In: in, Out: out, W: l.Tensor(module+".weight", out, in)}
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
		w := l.Tensor(name, n, out, in)
		if w == nil {
			return ls
		}
		for e := range ls {
			ls[e] = Linear{In: in, Out: out, W: w[e*out*in : (e+1)*out*in : (e+1)*out*in]}
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
	w := l.Tensor(name, n, 2*inter, hidden)
	gate, up = make([]Linear, n), make([]Linear, n)
	if w == nil {
		return gate, up, true
	}
	sz := inter * hidden
	for e := range n {
		base := e * 2 * sz
		gate[e] = Linear{In: hidden, Out: inter, W: w[base : base+sz : base+sz]}
		up[e] = Linear{In: hidden, Out: inter, W: w[base+sz : base+2*sz : base+2*sz]}
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
