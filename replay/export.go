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
	Ring     uint8 // Options.Ring: 0 (fp32) in blobs from before it existed
	Window   int32
	MaxDraft int32
	ConvCh   int32
	ConvK    int32
	Hist     int32
	Cur      int32
	Flushes  uint32
}

func (c *core) header(s Slot) exportHeader {
	hist, cur, flushes := c.ledger.Cursors(s)
	h := exportHeader{
		Version: exportVersion, Dims: c.dims,
		Mode: uint8(c.opt.Mode), State: uint8(c.opt.State), Read: uint8(c.opt.ReadCopy), Ring: uint8(c.opt.Ring),
		Window: int32(c.opt.Window), MaxDraft: int32(c.opt.MaxDraft),
		Hist: hist, Cur: cur, Flushes: flushes,
	}
	copy(h.Kind[:], c.kind)
	if c.conv != nil {
		h.ConvCh, h.ConvK = int32(c.conv.w.Channels), int32(c.conv.w.Kernel)
	}
	return h
}

// Export returns slot s's state as a self-describing blob: checkpoint or
// state buffers and read copy in their stored formats, the committed ring,
// cursors and conv window. Pending drafts are not exported.
func (c *core) Export(s Slot) ([]byte, error) {
	if err := c.ledger.Check(s); err != nil {
		return nil, fmt.Errorf("%s cache: export: %w", c.kind, err)
	}
	var buf bytes.Buffer
	buf.WriteString(exportMagic)
	h := c.header(s)
	if err := binary.Write(&buf, binary.LittleEndian, h); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	nb := c.opt.stateBuffers()
	out = c.state.appendBytes(out, int(s)*nb*c.heads, nb*c.heads)
	if c.read != nil {
		out = c.read.appendBytes(out, int(s)*c.heads, c.heads)
	}
	// Whole ring sections: the rings are laid out head-major, so a slot's
	// committed entries are not one prefix.
	R := c.opt.ring()
	for i, ring := range c.rings {
		w := c.widths[i]
		for _, v := range ring[int(s)*R*w : (int(s)+1)*R*w] {
			out = appendF32(out, v)
		}
	}
	if c.conv != nil {
		K1 := (c.conv.w.Kernel - 1) * c.conv.w.Channels
		for _, v := range c.conv.slot(s)[:K1] {
			out = appendF32(out, v)
		}
	}
	return out, nil
}

// Import overwrites live slot s with a blob from Export of a cache with the
// same kind, shape and options.
func (c *core) Import(s Slot, blob []byte) error {
	if err := c.ledger.Check(s); err != nil {
		return fmt.Errorf("%s cache: import: %w", c.kind, err)
	}
	if err := c.importInto(s, blob); err != nil {
		return fmt.Errorf("%s cache: import: %w", c.kind, err)
	}
	return nil
}

func (c *core) importInto(s Slot, blob []byte) error {
	if len(blob) < len(exportMagic) || string(blob[:len(exportMagic)]) != exportMagic {
		return errors.New("not a replayssm slot state")
	}
	r := bytes.NewReader(blob[len(exportMagic):])
	var h exportHeader
	if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
		return fmt.Errorf("truncated header: %w", err)
	}
	want := c.header(s)
	want.Hist, want.Cur, want.Flushes = h.Hist, h.Cur, h.Flushes
	if h != want {
		return fmt.Errorf("slot state from a different cache (kind %q dims %v mode %d state %d read %d ring %d window %d drafts %d), this one is kind %q dims %v mode %d state %d read %d ring %d window %d drafts %d",
			bytes.TrimRight(h.Kind[:], "\x00"), h.Dims, h.Mode, h.State, h.Read, h.Ring, h.Window, h.MaxDraft,
			c.kind, want.Dims, want.Mode, want.State, want.Read, want.Ring, want.Window, want.MaxDraft)
	}
	nb := c.opt.stateBuffers()
	if h.Hist < 0 || int(h.Hist) > c.opt.ring() || h.Cur < 0 || int(h.Cur) >= nb {
		return fmt.Errorf("cursors out of range (history %d, buffer %d)", h.Hist, h.Cur)
	}
	// The whole length first: a blob refused leaves the slot as it was.
	rest := blob[len(blob)-r.Len():]
	R := c.opt.ring()
	need := c.state.encodedBytes(nb * c.heads)
	if c.read != nil {
		need += c.read.encodedBytes(c.heads)
	}
	for _, w := range c.widths {
		need += 4 * w * R
	}
	if c.conv != nil {
		need += 4 * (c.conv.w.Kernel - 1) * c.conv.w.Channels
	}
	if len(rest) != need {
		return fmt.Errorf("slot state holds %d bytes after its header, want %d", len(rest), need)
	}
	var err error
	if rest, err = c.state.readBytes(rest, int(s)*nb*c.heads, nb*c.heads); err != nil {
		return err
	}
	if c.read != nil {
		if rest, err = c.read.readBytes(rest, int(s)*c.heads, c.heads); err != nil {
			return err
		}
	}
	for i, ring := range c.rings {
		w := c.widths[i]
		dst := ring[int(s)*R*w : (int(s)+1)*R*w]
		for j := range dst {
			dst[j], rest = readF32(rest)
		}
	}
	if c.conv != nil {
		dst := c.conv.slot(s)[:(c.conv.w.Kernel-1)*c.conv.w.Channels]
		for j := range dst {
			dst[j], rest = readF32(rest)
		}
	}
	return c.ledger.SetCursors(s, h.Hist, h.Cur, h.Flushes)
}
