package cuda

import (
	"encoding/binary"
	"fmt"
)

// TraceKind says which kernel a TraceRecord is from (the TRACE_* kinds of
// replay_common.cu).
type TraceKind uint8

// The kernels that record their blocks under TRACE.
const (
	TraceGroupStep   TraceKind = 1 // gdn_group_step: a decode step's non-flush slots
	TraceFlushStream TraceKind = 2 // gdn_flush_stream: the flushing slots
	TraceFoldStream  TraceKind = 3 // gdn_fold_stream: a verify's early folds
	TraceGroupVerify TraceKind = 4 // gdn_group_verify

	TraceM2GroupStep   TraceKind = 5 // mamba2_group_step
	TraceM2FlushPipe   TraceKind = 6 // mamba2_flush_pipe (items not counted)
	TraceM2FoldPipe    TraceKind = 7 // mamba2_fold_pipe (items not counted)
	TraceM2GroupVerify TraceKind = 8 // mamba2_group_verify
)

func (k TraceKind) String() string {
	switch k {
	case TraceGroupStep:
		return "group_step"
	case TraceFlushStream:
		return "flush_stream"
	case TraceFoldStream:
		return "fold_stream"
	case TraceGroupVerify:
		return "group_verify"
	case TraceM2GroupStep:
		return "m2_group_step"
	case TraceM2FlushPipe:
		return "m2_flush_pipe"
	case TraceM2FoldPipe:
		return "m2_fold_pipe"
	case TraceM2GroupVerify:
		return "m2_group_verify"
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// TraceRecord is one block's run of an instrumented kernel: its start and
// end on the device's global timer (ns), the SM it ran on, its index in
// the grid and how many items it took.
type TraceRecord struct {
	Start, End uint64
	Kind       TraceKind
	Items      int
	SM         int
	Block      int
}

// traceRecBytes is sizeof(TraceRec) in replay_common.cu.
const traceRecBytes = 24

// traceBuffers looks up a TRACE module's record array and count.
func (c *replayCommon) traceBuffers() (recs, count Buffer, err error) {
	if c.mod == nil {
		return Buffer{}, Buffer{}, ErrClosed
	}
	if recs, err = c.mod.Global("trace_recs"); err != nil {
		return Buffer{}, Buffer{}, fmt.Errorf("cuda: trace: the replay module was not built with -DTRACE=1 (REPLAYSSM_CUDA_DEFINES): %w", err)
	}
	if count, err = c.mod.Global("trace_count"); err != nil {
		return Buffer{}, Buffer{}, fmt.Errorf("cuda: trace: %w", err)
	}
	return recs, count, nil
}

// ResetTrace empties the trace of a module built with -DTRACE=1 (after the
// work queued on s so far).
func (c *replayCommon) ResetTrace(s *Stream) error {
	_, count, err := c.traceBuffers()
	if err != nil {
		return err
	}
	return s.Memset32(count, 0)
}

// ReadTrace returns the blocks recorded since the last ResetTrace, after
// the work queued on s, in the order they finished, and how many were
// dropped for want of room.
func (c *replayCommon) ReadTrace(s *Stream) ([]TraceRecord, int, error) {
	recs, count, err := c.traceBuffers()
	if err != nil {
		return nil, 0, err
	}
	var nb [4]byte
	if err := s.CopyFromDevice(nb[:], count); err != nil {
		return nil, 0, err
	}
	n := int(binary.LittleEndian.Uint32(nb[:]))
	capacity := recs.Bytes() / traceRecBytes
	kept := min(n, capacity)
	raw := make([]byte, kept*traceRecBytes)
	if err := s.CopyFromDevice(raw, recs); err != nil {
		return nil, 0, err
	}
	return decodeTrace(raw), n - kept, nil
}

// decodeTrace reads TraceRec records (replay_common.cu: start and end,
// then kind << 24 | items, then sm | block << 8, little-endian) from raw,
// whole records only.
func decodeTrace(raw []byte) []TraceRecord {
	out := make([]TraceRecord, len(raw)/traceRecBytes)
	for i := range out {
		b := raw[i*traceRecBytes:]
		tag, where := binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint32(b[20:])
		out[i] = TraceRecord{
			Start: binary.LittleEndian.Uint64(b),
			End:   binary.LittleEndian.Uint64(b[8:]),
			Kind:  TraceKind(tag >> 24),
			Items: int(tag & 0xffffff),
			SM:    int(where & 0xff),
			Block: int(where >> 8),
		}
	}
	return out
}
