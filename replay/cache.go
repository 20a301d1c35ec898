package replay

// Cache is the decode state of one SSM layer for every live sequence, on one
// backend: the contract the CPU caches of this package and the GPU caches of
// package cuda both implement, and that package replaytest checks.
//
// Buf is where the backend keeps a batch's rows of values ([]float32 on the
// CPU, a device buffer on the GPU); In is the layer's input batch
// (Mamba2Batch[Buf], GDNBatch[Buf] or KDABatch[Buf]). Slots are host-side
// handles: the caller says which sequences a call covers, and a backend
// that keeps its cursors on a device takes the list there itself.
//
// Row i of a Step's inputs and outputs belongs to slots[i]; row i·T+s of a
// Verify's is draft s of slots[i]. Slots in one call must be live and
// distinct, and buffers must hold the rows the call covers. A call that
// breaks the contract (a dead or repeated slot, a buffer too short, T or a
// count out of range, a blob of another cache) returns an error, never
// panics, and changes nothing. A cache is driven by one goroutine at a
// time.
type Cache[Buf, In any] interface {
	// Options returns the options in force (defaults filled in).
	Options() Options
	// Capacity is the number of slots.
	Capacity() int
	// Stats returns the counters since the cache was built.
	Stats() Stats

	// Admit takes a free slot and clears its state, ring and conv window.
	Admit() (Slot, error)
	// Reset clears a live slot's state, ring and conv window.
	Reset(Slot) error
	// Evict frees a slot.
	Evict(Slot) error
	// Fork admits a new slot holding a copy of src's state (pending drafts
	// are not copied).
	Fork(src Slot) (Slot, error)
	// Export returns a live slot's state as a self-describing blob.
	Export(Slot) ([]byte, error)
	// Import overwrites a live slot with a blob from Export of a cache of
	// the same kind, shape and options.
	Import(Slot, []byte) error

	// Conv runs the layer's causal depthwise convolution for one step of
	// each slot (in and out: [len(slots)][Channels]); the raw inputs enter
	// the slots' windows.
	Conv(slots []Slot, in, out Buf) error
	// ConvVerify runs the convolution over T draft inputs per slot
	// ([slot][T][Channels]) without moving the windows; Commit shifts them
	// by the accepted count.
	ConvVerify(slots []Slot, T int, in, out Buf) error
	// Step runs one decode step of each slot: y receives the SSM output,
	// and a replay slot whose ring reaches the window flushes. Pending
	// drafts of an earlier Verify are dropped.
	Step(slots []Slot, in In, y Buf) error
	// Verify computes the outputs of T draft inputs per slot (counts, when
	// not nil, gives each slot's own number, 1..T; rows past it are not
	// written) without writing any checkpoint (docs/DESIGN.md 2.3).
	Verify(slots []Slot, T int, counts []int, in In, y Buf) error
	// Commit accepts the first accepted[i] drafts of slots[i]'s last
	// Verify: a cursor move, nothing copied.
	Commit(slots []Slot, accepted []int) error

	// ConvPrefill runs the convolution over T consecutive inputs per slot
	// ([slot][T][Channels]; counts, when not nil, gives each slot's own
	// number, 1..T, and rows past it are neither read nor written) and
	// moves each window on by its count: Conv for a prompt's tokens.
	ConvPrefill(slots []Slot, T int, counts []int, in, out Buf) error
	// Prefill runs T consecutive inputs per slot (rows as Verify's, counts
	// as ConvPrefill's; T up to MaxPrefill, not bounded by the window)
	// through the recurrence as one multi-token forward (docs/DESIGN.md
	// 2.3b): y receives every input's output, computed from the state in
	// float32, never from a read copy. Replay mode folds the slot's ring
	// and the inputs into the checkpoint, rounded once to its format, and
	// leaves the ring empty; baseline mode rounds the state after every
	// input, as Step does. Pending drafts are dropped.
	Prefill(slots []Slot, T int, counts []int, in In, y Buf) error

	// Close releases the cache's memory and workers.
	Close() error
}

// Mamba2Batch is one batch of a Mamba-2 layer's SSM-core inputs on a
// backend, after the convolution and its activation: row r holds x [H·P],
// B and C [G·N] and the raw dt [H] (before dt_bias and the softplus). For
// Step, row i belongs to slots[i]; for Verify with T drafts, row i·T+s is
// draft s of slots[i].
type Mamba2Batch[Buf any] struct {
	X, B, C, Dt Buf
	// DtMin, when positive, clamps Δ = softplus(dt + dt_bias) from below.
	// transformers' NemotronH clamps Δ ≥ time_step_min on its multi-token
	// path (prefill, and a multi-token forward on a cache) and not in
	// single-token decode; a model sets DtMin to match.
	DtMin float32
}

// GDNBatch is one batch of a Gated DeltaNet layer's recurrence inputs on a
// backend, after the convolution and its activation, before the q/k
// normalisation: row r holds q and k [Hk·dk], v [Hv·dv], and the raw a and
// b [Hv] (g = −exp(A_log)·softplus(a+dt_bias), β = sigmoid(b)). Rows are
// laid out as in Mamba2Batch.
type GDNBatch[Buf any] struct {
	Q, K, V, A, B Buf
}

// KDABatch is one batch of a Kimi Delta Attention layer's recurrence
// inputs on a backend, after the convolution and its activation, before
// the q/k normalisation: row r holds q and k [Hk·dk], v [Hv·dv], the
// log-decay g [Hv·dk] (one per value head and key channel, g ≤ 0, as the
// layer computes it: Kimi's −exp(A_log)·softplus(· + dt_bias) or GLM's
// bounded sigmoid form) and the raw b [Hv] (β = sigmoid(b)). Rows are laid
// out as in Mamba2Batch.
type KDABatch[Buf any] struct {
	Q, K, V, G, B Buf
}

// Mamba2State is the contract of a Mamba-2 layer's cache on a backend.
type Mamba2State[Buf any] = Cache[Buf, Mamba2Batch[Buf]]

// GDNState is the contract of a Gated DeltaNet layer's cache on a backend.
type GDNState[Buf any] = Cache[Buf, GDNBatch[Buf]]

// KDAState is the contract of a Kimi Delta Attention layer's cache on a
// backend.
type KDAState[Buf any] = Cache[Buf, KDABatch[Buf]]
