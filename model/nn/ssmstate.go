package nn

import "github.com/replayssm/replayssm/replay"

// ssmState is an SSM layer's part of a State: its cache, each sequence's
// slot in it, and scratch for one call's slots.
type ssmState[In any] struct {
	cache replay.Cache[Tensor, In]
	slot  []replay.Slot // by sequence
	slots []replay.Slot // one call's slots
}

func newSSMState[In any](c replay.Cache[Tensor, In], capacity int) *ssmState[In] {
	return &ssmState[In]{cache: c, slot: make([]replay.Slot, capacity)}
}

func (s *ssmState[In]) admit(seq int) (err error) { s.slot[seq], err = s.cache.Admit(); return }
func (s *ssmState[In]) evict(seq int) error       { return s.cache.Evict(s.slot[seq]) }
func (s *ssmState[In]) stats() replay.Stats       { return s.cache.Stats() }
func (s *ssmState[In]) close()                    { _ = s.cache.Close() }

// commit keeps the first accepted[i] drafts of seqs[i]'s last verify.
func (s *ssmState[In]) commit(seqs []Seq, accepted []int) error {
	sl := s.slots[:0]
	for _, q := range seqs {
		sl = append(sl, s.slot[q])
	}
	s.slots = sl
	return s.cache.Commit(sl, accepted)
}

// committer is the blockState of a layer whose cache takes Commit.
type committer interface {
	commit(seqs []Seq, accepted []int) error
}
