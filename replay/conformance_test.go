package replay_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/replay/replaytest"
	"github.com/replayssm/replayssm/ssm"
)

// cpu is the CPU caches as a replaytest backend (a KDABackend: it has
// Kimi Delta Attention caches too): buffers are slices.
type cpu struct{}

func (cpu) Name() string                      { return "cpu" }
func (cpu) Capabilities() replay.Capabilities { return replay.CPUCapabilities() }

func (cpu) NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.Mamba2State[[]float32], error) {
	c, err := replay.NewMamba2(shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (cpu) NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.GDNState[[]float32], error) {
	c, err := replay.NewGDN(shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (cpu) NewKDA(shape ssm.GDNShape, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.KDAState[[]float32], error) {
	c, err := replay.NewKDA(shape, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ replaytest.KDABackend[[]float32] = cpu{}

func (cpu) Upload(v []float32) ([]float32, error) { return slices.Clone(v), nil }

func (cpu) Poisoned(n int) ([]float32, error) {
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(math.NaN())
	}
	return b, nil
}

func (cpu) Download(b, dst []float32) error {
	if len(b) < len(dst) {
		return fmt.Errorf("download of %d values from a buffer of %d", len(dst), len(b))
	}
	copy(dst, b)
	return nil
}

func (cpu) Free([]float32) {}

// TestConformance runs the cache contract's suite on the CPU caches.
func TestConformance(t *testing.T) { replaytest.Run[[]float32](t, cpu{}) }
