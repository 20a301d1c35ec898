package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// A GPU slot state leaves a cache as a self-describing blob (for prefix
// caching and migration between caches of one GPU process): a header
// naming the layer kind, shape and options and the slot's cursors, then
// the slot's device bytes in the cache's layout (state and read copy in
// their stored formats, the ring, the conv window). Import takes only a
// blob from a GPU cache with the same kind, shape and options; the CPU
// caches' blobs have their own layout.

const gpuExportMagic = "RSSMCUDA"

type gpuExportHeader struct {
	Version  uint32
	Kind     [8]byte
	Dims     [4]int32
	Mode     uint8
	State    uint8
	Read     uint8
	Ring     uint8
	Window   int32
	MaxDraft int32
	ConvCh   int32
	ConvK    int32
	Hist     int32
	Cur      int32
	Flushes  uint32
}

// header describes the cache (and, for a live slot, its cursors).
func (c *replayCommon) header(dims [4]int32) gpuExportHeader {
	h := gpuExportHeader{
		Version: 1, Dims: dims, Mode: uint8(c.opt.Mode), State: uint8(c.opt.State), Read: uint8(c.opt.ReadCopy),
		Ring: uint8(c.opt.Ring), Window: int32(c.opt.Window), MaxDraft: int32(c.opt.MaxDraft),
	}
	copy(h.Kind[:], c.kind)
	if c.conv != nil {
		h.ConvCh, h.ConvK = int32(c.conv.w.Channels), int32(c.conv.w.Kernel)
	}
	return h
}

func (c *Mamba2Cache) dims() [4]int32 {
	s := c.shape
	return [4]int32{int32(s.Heads), int32(s.HeadDim), int32(s.StateSize), int32(s.Groups)}
}

func (c *GDNCache) dims() [4]int32 {
	s := c.shape
	return [4]int32{int32(s.KeyHeads), int32(s.ValueHeads), int32(s.KeyDim), int32(s.ValueDim)}
}

// Export returns a live slot's state as a blob (after the work queued so
// far: it synchronises with the cache's stream).
func (c *Mamba2Cache) Export(s replay.Slot) ([]byte, error) { return c.export(s, c.dims()) }

// Import overwrites a live slot with a blob from Export of a GPU cache of
// the same kind, shape and options.
func (c *Mamba2Cache) Import(s replay.Slot, blob []byte) error {
	return c.importSlot(s, blob, c.dims())
}

// Export returns a live slot's state as a blob (see Mamba2Cache.Export).
func (c *GDNCache) Export(s replay.Slot) ([]byte, error) { return c.export(s, c.dims()) }

// Import overwrites a live slot with a blob (see Mamba2Cache.Import).
func (c *GDNCache) Import(s replay.Slot, blob []byte) error { return c.importSlot(s, blob, c.dims()) }

func (c *replayCommon) export(s replay.Slot, dims [4]int32) ([]byte, error) {
	if err := c.ledger.Check(s); err != nil {
		return nil, c.errorf("export", err)
	}
	h := c.header(dims)
	hist, cur, flushes := c.ledger.Cursors(s)
	h.Hist, h.Cur, h.Flushes = hist, cur, flushes
	var buf bytes.Buffer
	buf.WriteString(gpuExportMagic)
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		return nil, c.errorf("export", err)
	}
	out := buf.Bytes()
	for _, p := range c.slotParts(s) {
		n := len(out)
		out = append(out, make([]byte, p.bytes)...)
		if err := c.s.CopyFromDevice(out[n:], p); err != nil {
			return nil, c.errorf("export", err)
		}
	}
	return out, nil
}

func (c *replayCommon) importSlot(s replay.Slot, blob []byte, dims [4]int32) error {
	if err := c.ledger.Check(s); err != nil {
		return c.errorf("import", err)
	}
	if len(blob) < len(gpuExportMagic) || string(blob[:len(gpuExportMagic)]) != gpuExportMagic {
		return c.errorf("import", errors.New("not a replayssm GPU slot state"))
	}
	r := bytes.NewReader(blob[len(gpuExportMagic):])
	var h gpuExportHeader
	if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
		return c.errorf("import", fmt.Errorf("truncated header: %w", err))
	}
	want := c.header(dims)
	want.Hist, want.Cur, want.Flushes = h.Hist, h.Cur, h.Flushes
	if h != want {
		return c.errorf("import", fmt.Errorf("slot state from a different cache (kind %q dims %v mode %d state %d read %d ring %d window %d drafts %d conv %dx%d)",
			bytes.TrimRight(h.Kind[:], "\x00"), h.Dims, h.Mode, h.State, h.Read, h.Ring, h.Window, h.MaxDraft, h.ConvCh, h.ConvK))
	}
	rest := blob[len(blob)-r.Len():]
	parts := c.slotParts(s)
	need := 0
	for _, p := range parts {
		need += p.bytes
	}
	if len(rest) != need {
		return c.errorf("import", fmt.Errorf("slot sections hold %d bytes, want %d", len(rest), need))
	}
	if err := c.ledger.SetCursors(s, h.Hist, h.Cur, h.Flushes); err != nil {
		return c.errorf("import", err)
	}
	for _, p := range parts {
		if err := c.s.CopyToDevice(p, rest[:p.bytes]); err != nil {
			return c.errorf("import", err)
		}
		rest = rest[p.bytes:]
	}
	for _, v := range []struct {
		b Buffer
		x int32
	}{{c.cursor(c.hist, s), h.Hist}, {c.cursor(c.cur, s), h.Cur}, {c.cursor(c.pending, s), 0}} {
		if err := c.s.Memset32(v.b, uint32(v.x)); err != nil {
			return c.errorf("import", err)
		}
	}
	return nil
}
