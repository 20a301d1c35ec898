package replay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Slot states leave a cache as a self-describing blob (for prefix caching,
// migration between caches and tests): a header naming the layer kind, shape
// and options, the slot's cursors, its state buffers and read copy in their
// stored formats, the committed ring entries and the conv window. Import
// accepts only a blob from a cache with the same kind, shape and options.

const exportMagic = "RSSMSLOT"
const exportVersion = 1

type exportHeader struct {
	Version  uint32
	Kind     [8]byte
	Dims     [4]int32
	Mode     uint8
	State    uint8
	Read     uint8
	_        uint8
	Window   int32
	MaxDraft int32
	ConvCh   int32
	ConvK    int32
	Hist     int32
	Cur      int32
	Flushes  uint32
}

// exportable is the part of a cache that export/import needs.
type exportable struct {
	kind   string
	dims   [4]int32
	opt    Options
	slots  *slotTable
	state  *matrices
	read   *matrices
	conv   *convWindow
	rings  [][]float32 // each ring array, [slot][entry][width]
	widths []int
	heads  int // matrices per state buffer
}

func (e *exportable) header(s Slot) exportHeader {
	h := exportHeader{
		Version: exportVersion, Dims: e.dims,
		Mode: uint8(e.opt.Mode), State: uint8(e.opt.State), Read: uint8(e.opt.ReadCopy),
		Window: int32(e.opt.Window), MaxDraft: int32(e.opt.MaxDraft),
		Hist: e.slots.hist[s], Cur: e.slots.cur[s], Flushes: e.slots.flushes[s],
	}
	copy(h.Kind[:], e.kind)
	if e.conv != nil {
		h.ConvCh, h.ConvK = int32(e.conv.w.Channels), int32(e.conv.w.Kernel)
	}
	return h
}

func (e *exportable) export(s Slot) ([]byte, error) {
	if err := e.slots.check(s); err != nil {
		return nil, fmt.Errorf("%s cache: export: %w", e.kind, err)
	}
	var buf bytes.Buffer
	buf.WriteString(exportMagic)
	h := e.header(s)
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	nb := e.opt.stateBuffers()
	out = e.state.appendBytes(out, int(s)*nb*e.heads, nb*e.heads)
	if e.read != nil {
		out = e.read.appendBytes(out, int(s)*e.heads, e.heads)
	}
	R := e.opt.ring()
	for i, ring := range e.rings {
		w := e.widths[i]
		for _, v := range ring[int(s)*R*w : (int(s)*R+int(h.Hist))*w] {
			out = appendF32(out, v)
		}
	}
	if e.conv != nil {
		K1 := (e.conv.w.Kernel - 1) * e.conv.w.Channels
		for _, v := range e.conv.slot(s)[:K1] {
			out = appendF32(out, v)
		}
	}
	return out, nil
}

func (e *exportable) import_(s Slot, blob []byte) error {
	if err := e.slots.check(s); err != nil {
		return fmt.Errorf("%s cache: import: %w", e.kind, err)
	}
	if err := e.importInto(s, blob); err != nil {
		return fmt.Errorf("%s cache: import: %w", e.kind, err)
	}
	return nil
}

func (e *exportable) importInto(s Slot, blob []byte) error {
	if len(blob) < len(exportMagic) || string(blob[:len(exportMagic)]) != exportMagic {
		return errors.New("not a replayssm slot state")
	}
	r := bytes.NewReader(blob[len(exportMagic):])
	var h exportHeader
	if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
		return fmt.Errorf("truncated header: %w", err)
	}
	want := e.header(s)
	want.Hist, want.Cur, want.Flushes = h.Hist, h.Cur, h.Flushes
	if h != want {
		return fmt.Errorf("slot state from a different cache (kind %q dims %v mode %d state %d read %d window %d drafts %d), this one is kind %q dims %v mode %d state %d read %d window %d drafts %d",
			bytes.TrimRight(h.Kind[:], "\x00"), h.Dims, h.Mode, h.State, h.Read, h.Window, h.MaxDraft,
			e.kind, want.Dims, want.Mode, want.State, want.Read, want.Window, want.MaxDraft)
	}
	nb := e.opt.stateBuffers()
	if h.Hist < 0 || int(h.Hist) > e.opt.ring() || h.Cur < 0 || int(h.Cur) >= nb {
		return fmt.Errorf("cursors out of range (history %d, buffer %d)", h.Hist, h.Cur)
	}
	rest := blob[len(blob)-r.Len():]
	var err error
	if rest, err = e.state.readBytes(rest, int(s)*nb*e.heads, nb*e.heads); err != nil {
		return err
	}
	if e.read != nil {
		if rest, err = e.read.readBytes(rest, int(s)*e.heads, e.heads); err != nil {
			return err
		}
	}
	R := e.opt.ring()
	need := 0
	for _, w := range e.widths {
		need += 4 * w * int(h.Hist)
	}
	if e.conv != nil {
		need += 4 * (e.conv.w.Kernel - 1) * e.conv.w.Channels
	}
	if len(rest) != need {
		return fmt.Errorf("ring and conv sections hold %d bytes, want %d", len(rest), need)
	}
	for i, ring := range e.rings {
		w := e.widths[i]
		dst := ring[int(s)*R*w : (int(s)*R+int(h.Hist))*w]
		for j := range dst {
			dst[j], rest = readF32(rest)
		}
	}
	if e.conv != nil {
		dst := e.conv.slot(s)[:(e.conv.w.Kernel-1)*e.conv.w.Channels]
		for j := range dst {
			dst[j], rest = readF32(rest)
		}
	}
	e.slots.hist[s], e.slots.cur[s], e.slots.flushes[s], e.slots.pending[s] = h.Hist, h.Cur, h.Flushes, 0
	return nil
}

func (c *Mamba2Cache) exportable() *exportable {
	sh := c.shape
	e := &exportable{kind: "mamba2", dims: [4]int32{int32(sh.Heads), int32(sh.HeadDim), int32(sh.StateSize), int32(sh.Groups)},
		opt: c.opt, slots: &c.slots, state: c.state, read: c.read, conv: c.conv, heads: sh.Heads}
	if c.ringX != nil {
		e.rings = [][]float32{c.ringX, c.ringB, c.ringDt, c.ringA}
		e.widths = []int{sh.Heads * sh.HeadDim, sh.Groups * sh.StateSize, sh.Heads, sh.Heads}
	}
	return e
}

// Export returns slot s's state as a self-describing blob: checkpoint or
// state buffers and read copy in their stored formats, the committed ring,
// cursors and conv window. Pending drafts are not exported.
func (c *Mamba2Cache) Export(s Slot) ([]byte, error) { return c.exportable().export(s) }

// Import overwrites live slot s with a blob from Export of a cache with the
// same shape and options.
func (c *Mamba2Cache) Import(s Slot, blob []byte) error { return c.exportable().import_(s, blob) }

func (c *GDNCache) exportable() *exportable {
	sh := c.shape
	e := &exportable{kind: "gdn", dims: [4]int32{int32(sh.KeyHeads), int32(sh.ValueHeads), int32(sh.KeyDim), int32(sh.ValueDim)},
		opt: c.opt, slots: &c.slots, state: c.state, read: c.read, conv: c.conv, heads: sh.ValueHeads}
	if c.ringK != nil {
		e.rings = [][]float32{c.ringK, c.ringV, c.ringA, c.ringBeta, c.ringU}
		e.widths = []int{sh.KeyHeads * sh.KeyDim, sh.ValueHeads * sh.ValueDim, sh.ValueHeads, sh.ValueHeads, sh.ValueHeads * sh.ValueDim}
	}
	return e
}

// Export returns slot s's state as a self-describing blob. See
// Mamba2Cache.Export.
func (c *GDNCache) Export(s Slot) ([]byte, error) { return c.exportable().export(s) }

// Import overwrites live slot s with a blob from Export of a cache with the
// same shape and options.
func (c *GDNCache) Import(s Slot, blob []byte) error { return c.exportable().import_(s, blob) }
