package nn_test

import (
	"testing"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/nn/nntest"
)

func TestCPUBackend(t *testing.T) { nntest.Run(t, nn.CPU(), nntest.Float32) }
