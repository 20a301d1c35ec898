package nn

import (
	"fmt"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
)

// Backend runs the blocks' operations on one device. The blocks of this
// package are written once against it: an architecture never knows where it
// runs. CPU is the backend of this package; package cuda has the GPU's.
//
// Operations queue or run in call order and report nothing: a backend keeps
// the first failure (a device error, a kernel that could not launch) and
// returns it from Err, which Decoder checks at the end of every pass. Row
// lists ([]int32) are host memory; a backend that needs them on its device
// takes them there itself. Tensors of one call must not overlap unless the
// operation says it works in place.
type Backend interface {
	// Name names the device ("cpu", "cuda:0 NVIDIA H200").
	Name() string
	// Err returns the first failure since the backend was made, or nil.
	Err() error

	// Weight places a host matrix of rows × cols float32 values on the
	// device exactly, in float32 (norms, biases, a router's weights); w
	// must not change afterwards (the CPU backend keeps it, without
	// copying).
	Weight(w []float32, rows, cols int) Weight
	// Matrix places the weights of a product (MatMul's w, Embed's table)
	// in the backend's product format, which may round them (the CUDA
	// backend's default is bfloat16, the checkpoints' own format; the CPU
	// keeps w's). Like Weight's, w must not change afterwards.
	Matrix(w tensor.Weights, rows, cols int) Weight
	// NewArena returns scratch memory for one State's passes.
	NewArena() Arena

	// Embed writes the rows of table named by tokens into dst.
	Embed(dst Tensor, table Weight, tokens []int32)
	// MatMul computes y = x·Wᵀ (+ bias when bias has rows): x [n][In],
	// W [Out][In], y [n][Out].
	MatMul(y, x Tensor, w, bias Weight)
	// RMSNorm writes x̂·w to dst for every row of x (w has x.Cols values),
	// the RMS taken over groups of group consecutive values (0: the whole
	// row). Works in place.
	RMSNorm(dst, x Tensor, w Weight, eps float32, group int)
	// Add adds src to dst.
	Add(dst, src Tensor)
	// Copy copies src into dst (same shape; either may be a view).
	Copy(dst, src Tensor)
	// Gather sets dst row i to src row rows[i], or to zeros where rows[i]
	// is negative.
	Gather(dst, src Tensor, rows []int32)
	// Scatter sets dst row rows[i] to src row i, skipping negative rows[i].
	Scatter(dst, src Tensor, rows []int32)
	// AxpyRows adds w[i]·(src row i) to dst row rows[i].
	AxpyRows(dst, src Tensor, rows []int32, w []float32)

	// SiLU applies x·sigmoid(x) in place.
	SiLU(x Tensor)
	// MulSiLU multiplies dst by silu(z), elementwise.
	MulSiLU(dst, z Tensor)
	// MulSigmoid multiplies dst by sigmoid(g), elementwise.
	MulSigmoid(dst, g Tensor)
	// MulSigmoidRows multiplies dst row r by sigmoid(g[r][0]).
	MulSigmoidRows(dst, g Tensor)
	// SwiGLU sets up to silu(gate)·up.
	SwiGLU(up, gate Tensor)
	// ReLU2 applies relu(x)² in place.
	ReLU2(x Tensor)
	// ClampDelta rewrites raw dt values [rows][heads] so that
	// Δ = softplus(dt + dtBias[h]) lies in [lo, hi] (hi may be +Inf).
	ClampDelta(dt Tensor, dtBias Weight, lo, hi float64)
	// Rope rotates x [n·heads][HeadDim] in place, row r·heads+h at position
	// pos[r].
	Rope(x Tensor, r *tensor.Rope, pos []int32, heads int)
	// KDAGate rewrites Kimi Delta Attention's forget-gate logits f
	// [rows][heads·dk] in place into the log-decays
	// g = −exp(aLog[h])·softplus(f + dtBias[h·dk+i]), each ≤ 0, for head
	// h = column/dk (aLog has heads values, dtBias heads·dk; softplus is
	// x above 20, as PyTorch's), computed in float64.
	KDAGate(f Tensor, aLog, dtBias Weight)

	// Argmax writes to dst[r] the column of x's largest value in row r
	// (the first on ties), or -1 when the row holds a NaN or an infinity
	// (the forward pass broke), so that greedy decoding moves token ids
	// off the device, not logits.
	Argmax(dst []int32, x Tensor)
	// Sample writes to dst[r] the token SampleRow draws from row r of x
	// with p[r], or -1 when the row holds a NaN or an infinity (either
	// sign), as Argmax: sampling too moves only token ids off the device.
	// A device may differ from SampleRow where the draw lies within its
	// stated tolerance of a boundary.
	Sample(dst []int32, x Tensor, p []SampleParams)

	// Upload copies host values into dst (contiguous).
	Upload(dst Tensor, src []float32)
	// Download copies src to host memory.
	Download(dst []float32, src Tensor)

	// NewKV returns the keys and values of an attention layer for
	// capacity sequences, width values a position each.
	NewKV(capacity, width int) KVCache
	// NewLatent returns the per-position latents of a latent-attention
	// layer for capacity sequences, width values a position each.
	NewLatent(capacity, width int) LatentCache
	// NewMamba2 and NewGDN build an SSM layer's decode state for capacity
	// sequences (package replay's contract).
	NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (Mamba2Cache, error)
	NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (GDNCache, error)
	// NewKDA builds a Kimi Delta Attention layer's decode state; the layer
	// computes its log-decays itself (KDAGate), so the cache takes no
	// constants. A backend without KDA caches returns an error.
	NewKDA(shape ssm.GDNShape, conv replay.ConvWeights, capacity int, opt replay.Options) (KDACache, error)
}

// Mamba2Cache, GDNCache and KDACache are an SSM layer's state cache on a
// backend, over its tensors.
type (
	Mamba2Cache = replay.Mamba2State[Tensor]
	GDNCache    = replay.GDNState[Tensor]
	KDACache    = replay.KDAState[Tensor]
)

// KVCache holds one attention layer's keys and values for every sequence,
// paged (KVBlock): Truncate gives the blocks it empties back to the pool,
// Truncate(seq, 0) all of a sequence's.
type KVCache interface {
	// Len is the number of positions sequence seq holds.
	Len(seq int) int
	// Truncate keeps the first n positions of seq (n ≤ Len).
	Truncate(seq, n int)
	// Blocks reports the pool's blocks that hold positions and all it
	// holds (BlockTable.Blocks).
	Blocks() (used, held int)
	// Append adds row i of k and v at position pos[i] of sequence seqs[i];
	// each must be the sequence's next position, or nothing is appended.
	Append(k, v Tensor, seqs, pos []int32) error
	// Attend writes to o [n][heads·hd] the causal softmax attention of q
	// [n][heads·hd] over positions 0..pos[i] of seqs[i], query head h
	// reading key/value head h/(heads/kvHeads), scores scaled by scale.
	Attend(o, q Tensor, seqs, pos []int32, heads, kvHeads, hd int, scale float32)
	// Close releases the memory.
	Close()
}

// LatentCache holds one latent-attention layer's per-position latents
// (MLA's compressed keys and values) for every sequence.
type LatentCache interface {
	// Len is the number of positions sequence seq holds.
	Len(seq int) int
	// Truncate keeps the first n positions of seq (n ≤ Len).
	Truncate(seq, n int)
	// Append adds row i of x at position pos[i] of sequence seqs[i]; each
	// must be the sequence's next position, or nothing is appended.
	Append(x Tensor, seqs, pos []int32) error
	// Read writes positions [0, n) of sequence seq to dst [n][width]
	// (n ≤ Len).
	Read(dst Tensor, seq, n int)
	// Close releases the memory.
	Close()
}

// CheckAppend validates the rows of an Append to a per-sequence cache
// (KVCache, LatentCache): row i must hold position pos[i], its sequence's
// next one after the rows before it (len(q) is what sequence q holds). It
// returns the most positions one sequence will hold, for a backend that
// grows its storage first.
func CheckAppend(seqs, pos []int32, length func(seq int) int) (int, error) {
	need := 0
	for i, q := range seqs {
		next := length(int(q))
		for _, p := range seqs[:i] {
			if p == q {
				next++
			}
		}
		if int(pos[i]) != next {
			return 0, fmt.Errorf("sequence %d has %d cached positions, row is at position %d", q, next, pos[i])
		}
		need = max(need, next+1)
	}
	return need, nil
}

// Arena hands out a State's scratch tensors for one pass and takes them all
// back at Reset; Mark and Rewind take back a block's scratch once its
// output is written, so that a pass needs the memory of its largest block,
// not of all of them.
type Arena interface {
	// Alloc returns a rows × cols tensor of undefined contents, valid until
	// Reset or a Rewind to a mark taken before it.
	Alloc(rows, cols int) Tensor
	// Zeros is Alloc with the tensor zeroed.
	Zeros(rows, cols int) Tensor
	// Mark returns the arena's position; Rewind(mark) takes back every
	// tensor allocated since.
	Mark() int
	Rewind(mark int)
	// Reset takes every tensor back.
	Reset()
	// Close releases the memory (the arena is not used afterwards).
	Close()
}

// Tensor is a matrix of float32 activations on a backend: Rows rows of Cols
// values, row r starting at element Off + r·Stride of the backend's storage
// S. Views (Row, Slice, Cols) share the storage.
type Tensor struct {
	S                  any
	Off                int
	Rows, Cols, Stride int
}

// Slice returns rows [lo, hi).
func (t Tensor) Slice(lo, hi int) Tensor {
	t.Off += lo * t.Stride
	t.Rows = hi - lo
	return t
}

// Columns returns columns [off, off+n) of every row.
func (t Tensor) Columns(off, n int) Tensor {
	t.Off += off
	t.Cols = n
	return t
}

// Contiguous reports whether the rows follow each other without gaps.
func (t Tensor) Contiguous() bool { return t.Stride == t.Cols || t.Rows <= 1 }

// Reshape views a contiguous tensor as rows × cols (same element count).
func (t Tensor) Reshape(rows, cols int) Tensor {
	if !t.Contiguous() || rows*cols != t.Rows*t.Cols {
		panic("nn: reshape of a strided tensor or to another size")
	}
	return Tensor{S: t.S, Off: t.Off, Rows: rows, Cols: cols, Stride: cols}
}

// Weight is a matrix of weights on a backend (Rows 0: none).
type Weight struct {
	S          any
	Rows, Cols int
}

// Present reports whether w holds weights.
func (w Weight) Present() bool { return w.Rows > 0 }
