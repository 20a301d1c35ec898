package nn

import (
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// StateBytes is the recurrent-state memory of one sequence in one SSM layer,
// split by what holds it.
type StateBytes struct {
	// States is the full state matrices: the replay checkpoint, or the
	// baseline's state buffers (one per speculative position).
	States int64
	// Ring is the replay ring of raw inputs (zero for the baseline).
	Ring int64
	// ReadCopy is the replay read copy of the checkpoint, if any.
	ReadCopy int64
	// Conv is the conv window: the last K−1 raw inputs plus room for drafts.
	Conv int64
}

// Total is the sum of the parts.
func (b StateBytes) Total() int64 { return b.States + b.Ring + b.ReadCopy + b.Conv }

// Add returns the sum of two StateBytes.
func (b StateBytes) Add(o StateBytes) StateBytes {
	return StateBytes{States: b.States + o.States, Ring: b.Ring + o.Ring, ReadCopy: b.ReadCopy + o.ReadCopy, Conv: b.Conv + o.Conv}
}

// matrixBytes is the size of one state matrix of elems elements in format f,
// as package replay stores it (fp8 with one scale, nvfp4 with block scales
// and one global scale).
func matrixBytes(f numeric.Format, elems int) int64 {
	e := int64(elems)
	switch f {
	case numeric.F16, numeric.BF16:
		return 2 * e
	case numeric.E4M3:
		return e + 4
	case numeric.NVFP4:
		return e/2 + e/16 + 4
	}
	return 4 * e
}

// buffers is the number of full states a sequence holds in the mode of opt:
// one checkpoint for replay, 1+MaxDraft for the baseline, as replay allocates.
func buffers(opt replay.Options) int64 {
	if opt.Mode == replay.Baseline {
		return 1 + int64(opt.MaxDraft)
	}
	return 1
}

func window(opt replay.Options) int64 {
	if opt.Window == 0 {
		return replay.DefaultWindow
	}
	return int64(opt.Window)
}

// Mamba2StateBytes is what a replay.Mamba2Cache built with opt allocates per
// sequence for a layer of shape sh with a conv of convChannels×convKernel
// (convChannels 0: no conv window).
func Mamba2StateBytes(sh ssm.Mamba2Shape, convChannels, convKernel int, opt replay.Options) StateBytes {
	H, P, N, G := int64(sh.Heads), int64(sh.HeadDim), int64(sh.StateSize), int64(sh.Groups)
	b := StateBytes{States: buffers(opt) * H * matrixBytes(opt.State, sh.HeadDim*sh.StateSize)}
	if opt.Mode == replay.Replay {
		// x, B, Δ and the step decay per entry; L + MaxDraft entries.
		b.Ring = (window(opt) + int64(opt.MaxDraft)) * 4 * (H*P + G*N + 2*H)
		if opt.ReadCopy != numeric.F32 {
			b.ReadCopy = H * matrixBytes(opt.ReadCopy, sh.HeadDim*sh.StateSize)
		}
	}
	b.Conv = convBytes(convChannels, convKernel, opt)
	return b
}

// GDNStateBytes is what a replay.GDNCache built with opt allocates per
// sequence for a layer of shape sh (see Mamba2StateBytes).
func GDNStateBytes(sh ssm.GDNShape, convChannels, convKernel int, opt replay.Options) StateBytes {
	return deltaStateBytes(sh, 1, convChannels, convKernel, opt)
}

// KDAStateBytes is what a replay.KDACache built with opt allocates per
// sequence for a layer of shape sh (see Mamba2StateBytes): GDN's, with a
// decay per key channel in each ring entry.
func KDAStateBytes(sh ssm.GDNShape, convChannels, convKernel int, opt replay.Options) StateBytes {
	return deltaStateBytes(sh, sh.KeyDim, convChannels, convKernel, opt)
}

// deltaStateBytes is a delta-rule cache's per-sequence bytes with decays
// decay values per value head in each ring entry.
func deltaStateBytes(sh ssm.GDNShape, decays, convChannels, convKernel int, opt replay.Options) StateBytes {
	Hk, Hv, dk, dv := int64(sh.KeyHeads), int64(sh.ValueHeads), int64(sh.KeyDim), int64(sh.ValueDim)
	b := StateBytes{States: buffers(opt) * Hv * matrixBytes(opt.State, sh.KeyDim*sh.ValueDim)}
	if opt.Mode == replay.Replay {
		// k, v, the decays, β and the cached u per entry.
		b.Ring = (window(opt) + int64(opt.MaxDraft)) * 4 * (Hk*dk + 2*Hv*dv + Hv*int64(decays) + Hv)
		if opt.ReadCopy != numeric.F32 {
			b.ReadCopy = Hv * matrixBytes(opt.ReadCopy, sh.KeyDim*sh.ValueDim)
		}
	}
	b.Conv = convBytes(convChannels, convKernel, opt)
	return b
}

func convBytes(channels, kernel int, opt replay.Options) int64 {
	if channels <= 0 {
		return 0
	}
	return 4 * int64(channels) * int64(kernel-1+max(1, opt.MaxDraft))
}

// StateBytes is the recurrent-state memory of one sequence summed over the
// decoder's SSM layers, for caches built with opt (attention KV caches not
// included: they grow with the sequence and are the same in every mode).
func (d *Decoder) StateBytes(opt replay.Options) StateBytes {
	var t StateBytes
	for _, l := range d.Layers {
		for _, br := range l.Branches {
			switch m := br.Block.(type) {
			case *Mamba2Mixer:
				t = t.Add(Mamba2StateBytes(m.Shape, m.Conv.Channels, m.Conv.Kernel, opt))
			case *GDNMixer:
				t = t.Add(GDNStateBytes(m.Shape, m.Conv.Channels, m.Conv.Kernel, opt))
			case *KDAMixer:
				t = t.Add(KDAStateBytes(m.Shape, m.Conv.Channels, m.Conv.Kernel, opt))
			}
		}
	}
	return t
}

// SSMLayers is the number of SSM blocks (Mamba-2, Gated DeltaNet or Kimi
// Delta Attention mixers)
// in the decoder: the layers whose recurrent state the state cache keeps.
func (d *Decoder) SSMLayers() int {
	n := 0
	for _, l := range d.Layers {
		for _, br := range l.Branches {
			switch br.Block.(type) {
			case *Mamba2Mixer, *GDNMixer, *KDAMixer:
				n++
			}
		}
	}
	return n
}

// KVBytesPerToken is the key and value memory one position of one sequence
// takes over every attention layer (float32, as both backends store them);
// a latent-attention layer keeps its latent. The scratch of a latent layer's
// pass, one sequence's keys and values rebuilt, is not counted.
func (d *Decoder) KVBytesPerToken() int64 {
	var n int64
	for _, l := range d.Layers {
		for _, br := range l.Branches {
			switch a := br.Block.(type) {
			case *Attention:
				n += 2 * 4 * int64(a.KVHeads*a.HeadDim)
			case *MLA:
				n += 4 * int64(a.Rank+a.RopeDim) // the latent, not the keys and values rebuilt from it
			}
		}
	}
	return n
}

// WeightBytes estimates the memory the weights take on a backend that
// stores values productBytes bytes each (the float32 norms, biases and
// routers counted at that size too: well under 1% of a model). MTP heads
// are not counted.
func (d *Decoder) WeightBytes(productBytes int) int64 {
	return int64(productBytes) * int64(d.Params())
}
