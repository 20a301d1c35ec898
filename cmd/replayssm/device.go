package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/replayssm/replayssm/backend/cuda"
	"github.com/replayssm/replayssm/model/nn"
)

// deviceFlag adds --device to a command's flags.
func deviceFlag(fs *flag.FlagSet) *string {
	return fs.String("device", "auto", "where the model runs: auto (the GPU when one is usable, else the CPU), cpu or cuda")
}

// place puts d on the device --device names, says on stderr which it chose,
// and registers the device's release with e. auto falls back to the CPU
// when no GPU is usable; cuda fails with the reason.
func place(ctx context.Context, e *env, d *nn.Decoder, device string) error {
	switch device {
	case "cpu":
		d.Place(nn.CPU())
		return nil
	case "auto", "cuda":
	default:
		return fmt.Errorf("%w: --device %q: want auto, cpu or cuda", errUsage, device)
	}
	be, err := openGPU(ctx, e)
	if err == nil {
		d.Place(be)
		if err = be.Err(); err != nil {
			err = fmt.Errorf("placing the weights: %w", err)
		}
	}
	switch {
	case err == nil:
		fmt.Fprintf(e.stderr, "device: %s\n", be.Name())
		return nil
	case device == "cuda":
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

// openGPU opens GPU 0 and a model backend on it, released when the command
// ends.
func openGPU(ctx context.Context, e *env) (*cuda.NNBackend, error) {
	if e.gpu != nil {
		return e.gpu, nil
	}
	dev, err := cuda.Open(ctx, cuda.Options{})
	if err != nil {
		return nil, err
	}
	be, err := cuda.NewNNBackend(ctx, dev)
	if err != nil {
		dev.Close()
		return nil, err
	}
	e.gpu = be
	e.closers = append(e.closers, func() error { return errors.Join(be.Close(), dev.Close()) })
	return be, nil
}
