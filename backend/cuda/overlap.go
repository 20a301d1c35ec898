package cuda

// The decode step's flush and the verify's early folds on a second stream,
// beside the kernels that take the other slots (OVERLAP, VPART in
// replay_common.cu).

import "github.com/replayssm/replayssm/replay"

// overlap is the plan of a module built with OVERLAP (replay_common.cu):
// a decode step's flush kernel (the pipelined fold where the layer folds
// with it, else the items kernel) runs on side, a stream of the
// greatest priority (its blocks start first; with low, the default
// priority), forked from the step's stream by fork and joined back by
// join, beside the non-flush kernel. In a step where no slot flushes the
// flush's blocks only list the cursors and leave, but while resident they
// hold their shared memory (likely why session 28 measured the non-flush
// step 1-6% slower beside larger flush blocks); low is the experiment of
// starting them second.
//
// With verify, a verify is split the same way (VPART): the early folds and
// then the group verify of the slots that fold go on side, the group
// verify of the other slots on the verify's stream beside them.
type overlap struct {
	on         bool
	verify     bool
	blocks     int  // a bound on the flush kernel's grid (0: its resident grid)
	low        bool // side at the default priority (REPLAYSSM_CUDA_OVERLAP_PRIORITY=0; NOTES.md, session 28)
	main       bool // the non-flush kernel queued before the flush (REPLAYSSM_CUDA_OVERLAP_ORDER=main; session 29)
	side       *Stream
	fork, join *Event
}

// planOverlap returns the plan and defines of a replay module of layer
// kind ("mamba2" or "gdn"): the flush beside the non-flush kernel for GDN,
// or as tn forces it (REPLAYSSM_CUDA_OVERLAP, _OVERLAP_BLOCKS).
//
// Measured on the H200 (session 13, staggered windows, against the flush
// before the non-flush kernel in the same run): GDN B=64 Qwen3.5-4B 79.2 ->
// 71.2 us (fp32), 64.1 -> 48.1 (bf16), 122B 116 -> 110, 87.6 -> 84.2 (the
// flush on one block per SM); B=256 209 -> 206, 151 -> 147, 374 -> 363,
// 267 -> 255 (on the flush's resident grid, 264 blocks; one per SM was
// slower). Mamba-2 slower in every case (Nano B=256 fp32 315 -> 329, B=64
// 94.5 -> 110) when the overlap replaced its default flush, the pipelined
// fold (v7), by the slower items kernel; its non-flush step slowed too.
// With the pipelined fold kept (session 31, B=256 windows): Super 336 ->
// 324 (fp32), 216 -> 204 (bf16), but Nano 315 -> 323 and 208 -> 210, and
// every shape slower at B=64 (Nano fp32 94 -> 109); the block timelines
// showed the flush's resident grid holding every SM until it ends, so
// Mamba-2 keeps the flush before the step.
//
// The verify's split (tn.overlapVer, REPLAYSSM_CUDA_VERIFY_OVERLAP=1) is
// off by default: Mamba-2 in session 31, verify us, Nano fp32 482 -> 468,
// Super bf16 347 -> 339, Nano bf16 341 -> 358 (NOTES.md).
func planOverlap(kind string, opt replay.Options, tn tuning) (overlap, []string) {
	if opt.Mode != replay.Replay {
		return overlap{}, nil
	}
	o := overlap{on: kind == "gdn", verify: tn.overlapVer, blocks: tn.overlapGrid, low: tn.overlapLow, main: tn.overlapMain}
	if tn.overlap != "" {
		o.on = tn.overlap == "1"
	}
	var defines []string
	if o.on {
		defines = append(defines, "-DOVERLAP=1")
	}
	if o.verify {
		defines = append(defines, "-DVPART=1")
	}
	if !o.on && !o.verify {
		return overlap{}, nil
	}
	return o, defines
}

// launchOverlapped queues a decode step above the small batch with the
// flush beside the non-flush kernel: the side stream waits for the work
// queued so far, takes the flush, and the step's stream waits for it after
// its own kernel. Both kernels count their blocks on c.done, and the last
// to finish moves the cursors (step_done). Captured in a graph, the fork
// and join are the graph's edges. The flush is the pipelined fold where
// the layer folds with it (Mamba-2's default; measured beside the group
// step only as a first experiment, NOTES.md session 13), else the items
// kernel.
//
// With o.main the non-flush kernel is queued first (the fork recorded
// before it, so the flush still waits only for the steps before): session
// 29's block timelines (`bench kernels --trace`) had the flush's blocks,
// queued first at the greatest priority, take every SM for the first
// 18 us of a staggered Qwen3.5-4B fp32 step (43 us for 122B) before the
// group step's first block started, and the one step of each window where
// the group step's blocks happened to start first ran 172 us against 178.
// Queued first, though, the group step's persistent blocks hold the SMs
// until its queue is empty, and the flush's latency-bound items then run
// nearly alone at the step's end. Against the defaults in the same run
// (session 29, with FL_QUEUE), staggered windows at B=256, us: Qwen3.5-4B
// fp32 177 -> 176, 122B fp32 319 -> 315, but bf16 113 -> 124 and 197 ->
// 208; B=512 fp32 even or 1% faster, bf16 3% slower; B=64 all slower
// (4B fp32 53 -> 65). Off.
func (c *replayCommon) launchOverlapped(s *Stream, a *Args, batch int, grid [3]uint32) error {
	o := &c.overlap
	if o.main {
		if err := o.fork.Record(s); err != nil {
			return err
		}
		if err := c.launchNonflush(s, a, batch, grid); err != nil {
			return err
		}
		if err := o.side.Wait(o.fork); err != nil {
			return err
		}
		if err := c.launchFlush(o.side, a, batch, o.blocks); err != nil {
			return err
		}
		return o.merge(s)
	}
	if err := o.branch(s); err != nil {
		return err
	}
	if err := c.launchFlush(o.side, a, batch, o.blocks); err != nil {
		return err
	}
	if err := c.launchNonflush(s, a, batch, grid); err != nil {
		return err
	}
	return o.merge(s)
}

// branch makes the side stream's next work wait for the work queued on s
// so far.
func (o *overlap) branch(s *Stream) error {
	if err := o.fork.Record(s); err != nil {
		return err
	}
	return o.side.Wait(o.fork)
}

// merge makes s's next work wait for the work queued on the side stream
// so far.
func (o *overlap) merge(s *Stream) error {
	if err := o.join.Record(o.side); err != nil {
		return err
	}
	return s.Wait(o.join)
}
