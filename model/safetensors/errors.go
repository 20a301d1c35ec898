package safetensors

import (
	"errors"
	"fmt"
	"strconv"
)

// Kinds of failure, for errors.Is. Every error this package returns about a
// file's content is an *Error whose Kind is one of these.
var (
	// ErrFormat: the file is not a valid safetensors file (bad header, lying
	// offsets, overlapping tensors, a shard index that does not add up).
	ErrFormat = errors.New("malformed safetensors file")
	// ErrNotFound: no tensor of that name.
	ErrNotFound = errors.New("tensor not found")
	// ErrShape: the tensor's shape is not the one the caller expects.
	ErrShape = errors.New("tensor shape mismatch")
	// ErrDType: the tensor's dtype is unknown or cannot be converted as asked.
	ErrDType = errors.New("unsupported dtype")
	// ErrClosed: the File or Checkpoint was closed.
	ErrClosed = errors.New("file closed")
)

// Error describes a problem with one file and, where it applies, one tensor.
// Its message names both, e.g.
//
//	model.safetensors: tensor "backbone.norm_f.weight": shape [64], want [96]
type Error struct {
	File   string // path of the file, as given to Open or OpenDir
	Tensor string // tensor name; empty when the problem is not about one tensor
	Kind   error  // ErrFormat, ErrNotFound, ErrShape, ErrDType or ErrClosed
	Detail string // what is wrong, with the numbers found and expected
}

// Error returns "file: tensor \"name\": detail" (without the tensor part when
// the problem is not about one tensor).
func (e *Error) Error() string {
	s := e.File + ": "
	if e.Tensor != "" {
		s += "tensor " + strconv.Quote(e.Tensor) + ": "
	}
	return s + e.Detail
}

// Unwrap returns the Kind, so errors.Is(err, ErrShape) works.
func (e *Error) Unwrap() error { return e.Kind }

func newError(file, tensor string, kind error, format string, args ...any) *Error {
	return &Error{File: file, Tensor: tensor, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}
