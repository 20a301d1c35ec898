package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/replayssm/replayssm/backend/cuda"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// deviceChoice is what --device, --dtype and --eager ask for.
type deviceChoice struct {
	device string // auto, cpu or cuda
	dtype  string // bf16 or fp32: the GPU's product weights, and random ones
	eager  bool   // no CUDA graphs
}

// deviceFlags adds --device, --dtype and --eager to a command's flags.
func deviceFlags(fs *flag.FlagSet) *deviceChoice {
	c := &deviceChoice{}
	fs.StringVar(&c.device, "device", "auto", "where the model runs: auto (the GPU when one is usable, else the CPU), cpu or cuda")
	fs.BoolVar(&c.eager, "eager", false, "on the GPU, queue every kernel at once instead of replaying repeated decode steps as CUDA graphs")
	fs.StringVar(&c.dtype, "dtype", "bf16", "the weight format for matrix products on the GPU, and of random weights: bf16 (as models are released) or fp32; the CPU keeps a checkpoint's own format and computes in fp32")
	return c
}

func (c deviceChoice) weights() (cuda.DataType, error) {
	switch c.dtype {
	case "bf16", "bfloat16":
		return cuda.BFloat16, nil
	case "fp32", "float32":
		return cuda.Float32, nil
	}
	return 0, fmt.Errorf("%w: --dtype %q: want bf16 or fp32", errUsage, c.dtype)
}

// products is the format random product weights are made in (--dtype).
func (c deviceChoice) products() (tensor.DType, error) {
	wt, err := c.weights()
	if wt == cuda.Float32 {
		return tensor.Float32, err
	}
	return tensor.BFloat16, err
}

// place puts d on the device c names, says on stderr which it chose,
// and registers the device's release with e. auto falls back to the CPU
// when no GPU is usable; cuda fails with the reason, among them weights
// that do not fit the GPU's free memory.
func place(ctx context.Context, e *env, d *nn.Decoder, c deviceChoice) error {
	wt, err := c.weights()
	if err != nil {
		return err
	}
	switch c.device {
	case "cpu":
		d.Place(nn.CPU())
		return nil
	case "auto", "cuda":
	default:
		return fmt.Errorf("%w: --device %q: want auto, cpu or cuda", errUsage, c.device)
	}
	be, err := openGPU(ctx, e, cuda.NNOptions{Weights: wt, Eager: c.eager})
	if err == nil {
		err = fits(be, d.WeightBytes(wt.Size()), "the weights")
	}
	if err == nil {
		d.Place(be)
		if err = be.Err(); err != nil {
			err = fmt.Errorf("placing the weights: %w", err)
		}
	}
	switch {
	case err == nil:
		graphs := "CUDA graphs"
		if c.eager {
			graphs = "eager"
		}
		fmt.Fprintf(e.stderr, "device: %s (%s weights, %s, %s)\n", be.Name(), wt, bytesString(be.WeightBytes()), graphs)
		return nil
	case c.device == "cuda":
		return fmt.Errorf("--device cuda: %w", err)
	}
	reason := err.Error()
	if errors.Is(err, cuda.ErrNoDriver) {
		reason = "no CUDA driver"
	}
	fmt.Fprintf(e.stderr, "device: cpu (%s)\n", reason)
	d.Place(nn.CPU())
	return nil
}

// memoryHeadroom is kept free beyond what a check counts: cuBLAS's
// workspace, the activation arenas and the allocator's rounding.
const memoryHeadroom = 1 << 30

// fits reports, as one line, when need bytes for what would not fit the
// GPU's free memory.
func fits(be *cuda.NNBackend, need int64, what string) error {
	free, err := be.Device().FreeMemoryBytes()
	if err != nil {
		return err
	}
	if need+memoryHeadroom > free {
		return fmt.Errorf("%s need %s (+%s headroom) but the GPU has %s free", what, bytesString(need), bytesString(memoryHeadroom), bytesString(free))
	}
	return nil
}

// fitsState checks, when d runs on the GPU, that the state of capacity
// sequences in mode opt with room for positions tokens each fits.
func fitsState(d *nn.Decoder, capacity, positions int, opt replay.Options) error {
	be, ok := d.Backend().(*cuda.NNBackend)
	if !ok {
		return nil
	}
	// The KV cache grows by doubling: up to twice the positions.
	need := int64(capacity) * (d.StateBytes(opt).Total() + 2*int64(positions)*d.KVBytesPerToken())
	return fits(be, need, fmt.Sprintf("the state of %d sequences of %d tokens", capacity, positions))
}

// openGPU opens GPU 0 and a model backend on it, released when the command
// ends.
func openGPU(ctx context.Context, e *env, opt cuda.NNOptions) (*cuda.NNBackend, error) {
	if e.gpu != nil {
		return e.gpu, nil
	}
	dev, err := cuda.Open(ctx, cuda.Options{})
	if err != nil {
		return nil, err
	}
	be, err := cuda.NewNNBackend(ctx, dev, opt)
	if err != nil {
		dev.Close()
		return nil, err
	}
	e.gpu = be
	e.closers = append(e.closers, func() error { return errors.Join(be.Close(), dev.Close()) })
	return be, nil
}

// freeMemory is the memory free for state where d runs: the GPU's free
// memory, or on the CPU the machine's available memory (Linux's
// /proc/meminfo MemAvailable).
func freeMemory(d *nn.Decoder) (int64, error) {
	if be, ok := d.Backend().(*cuda.NNBackend); ok {
		return be.Device().FreeMemoryBytes()
	}
	return hostFreeMemory()
}

// hostFreeMemory is this machine's available memory (Linux's
// /proc/meminfo MemAvailable).
func hostFreeMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("the machine's free memory is unknown: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10, nil
			}
		}
	}
	return 0, errors.New("the machine's free memory is unknown: no MemAvailable in /proc/meminfo")
}
