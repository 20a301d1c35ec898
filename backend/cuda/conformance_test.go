package cuda

import (
	"context"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/replay/replaytest"
	"github.com/replayssm/replayssm/ssm"
)

// gpuBackend is the GPU caches as a replaytest backend: buffers in device
// memory, every cache and copy on one stream, so that a download follows
// the work queued before it.
type gpuBackend struct {
	d *Device
	s *Stream
}

func (gpuBackend) Name() string                      { return "cuda" }
func (gpuBackend) Capabilities() replay.Capabilities { return Capabilities() }

func (b gpuBackend) NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.Mamba2State[Buffer], error) {
	c, err := NewMamba2Cache(context.Background(), b.s, shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (b gpuBackend) NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.GDNState[Buffer], error) {
	c, err := NewGDNCache(context.Background(), b.s, shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (b gpuBackend) Upload(v []float32) (Buffer, error) {
	buf, err := b.d.Alloc(4 * max(1, len(v)))
	if err != nil {
		return Buffer{}, err
	}
	return buf, b.s.CopyToDevice(buf, f32Bytes(v))
}

func (b gpuBackend) Poisoned(n int) (Buffer, error) {
	buf, err := b.d.Alloc(4 * max(1, n))
	if err != nil {
		return Buffer{}, err
	}
	return buf, b.s.Memset32(buf, math.Float32bits(float32(math.NaN())))
}

func (b gpuBackend) Download(buf Buffer, dst []float32) error {
	return b.s.CopyFromDevice(f32Bytes(dst), buf)
}

func (b gpuBackend) Free(buf Buffer) {
	b.s.Synchronize()
	b.d.Free(buf)
}

// TestConformance runs the cache contract's suite (package replaytest) on
// the GPU caches: the same checks, against the same float64 references,
// as the CPU caches pass.
func TestConformance(t *testing.T) {
	d := gpu(t)
	prewarm(t, d)
	replaytest.Run[Buffer](t, gpuBackend{d, stream(t, d)})
}

// prewarm compiles the modules of every cache the suite builds, on all
// cores at once, so that the suite's caches (built one after another)
// find them in the kernel cache.
func prewarm(t *testing.T, d *Device) {
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for _, c := range replaytest.Configs() {
		var plan cachePlan
		var err error
		if c.Kind == "mamba2" {
			plan, err = planMamba2(c.Mamba2, c.Options, d.props())
		} else {
			plan, err = planGDN(c.GDN, c.Options, d.props())
		}
		if err != nil {
			continue // refused: the suite checks the refusal
		}
		for _, p := range []*cachePlan{&plan, plan.split} {
			if p == nil {
				continue
			}
			capacity := c.Capacity
			if p.parts > 0 {
				capacity = 0
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				src, err := replaySource(p.file)
				if err == nil {
					var m *Module
					if m, err = d.Compile(context.Background(), p.file, src, p.options(capacity)...); err == nil {
						err = m.Close()
					}
				}
				if err != nil {
					t.Errorf("prewarm %s %+v: %v", c.Kind, c.Options, err)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("modules built in %v: %v", time.Since(start).Round(time.Millisecond), d.CompileStats())
}
