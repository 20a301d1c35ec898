// Package cuda drives NVIDIA GPUs from pure Go: the CUDA driver API, NVRTC and
// cuBLAS are loaded at run time with purego, so the module builds with
// CGO_ENABLED=0 and a machine without a driver gets [ErrNoDriver] from [Open].
//
// It is the foundation the ReplaySSM GPU kernels stand on: device memory
// ([Buffer]), ordered work ([Stream], [Event]), CUDA graphs ([Graph],
// [GraphExec], and the deferred streams that make them of repeated work), kernels compiled from embedded .cu sources by NVRTC with an
// on-disk cache ([Module], [Function], [Args]), one GEMM entry point ([BLAS])
// and the measurements a benchmark reports next to its times ([Timer],
// [Device.MeasureCopyBandwidth]).
//
// # Threads and contexts
//
// A CUDA context is current per OS thread, while goroutines migrate between
// threads. Two designs keep the right context current: a device-owner
// goroutine locked to one thread that runs every driver call sent to it over a
// channel, or a short runtime.LockOSThread + cuCtxSetCurrent around each call.
// This package does the second. A channel hand-off to a locked thread costs
// two goroutine switches and usually a futex wake of the owner thread
// (microseconds, the order of a launch itself; estimated, not measured),
// while the lock, the thread pin and cuCtxSetCurrent together cost 115 ns on
// the H200 host, against about 4 µs of driver time per cuLaunchKernel.
// It also lets goroutines share a Device freely. Every Device uses
// the device's primary context (cuDevicePrimaryCtxRetain), the same one the
// CUDA runtime inside cuBLAS attaches to, so handles can be shared with it.
//
// # Hot path
//
// Kernel launches, event records, graph launches and GEMMs do not allocate:
// purego.SyscallN heap-allocates its variadic slice when the caller builds
// one, so these calls pass a slice of a scratch array owned by the Device and
// guarded by its mutex, and kernel arguments are marshalled into a pinned host
// buffer (cuMemHostAlloc) that is reused for every launch. Pinned, not Go,
// memory also means no Go pointer is ever handed to the driver to hold.
//
// # Streams
//
// Streams are created non-blocking: they do not synchronise with the legacy
// default stream, so a graph capture on one stream is never invalidated by
// another goroutine's synchronous copy. The synchronous Device copies are
// therefore NOT ordered after work queued on a Stream: synchronise that stream
// first, or use the Stream's own ordered operations.
//
// # Deferred streams and CUDA graphs
//
// A model's decode step is a few hundred small kernels, and at small
// batches the host's launches, not the kernels, set its pace. A stream can
// therefore be deferred ([Stream.Defer]; the model backend's is by default):
// it records launches, copies, memsets, event records and waits and cuBLAS
// calls on a tape instead of queueing them, and plays the tape when the host
// waits (Synchronize, a copy to the host, an event's Synchronize, Close). A
// tape seen once before, operation for operation and argument byte for
// argument byte, is captured as a graph the second time and launched as one
// the times after, so a decode step of a fixed batch costs one launch.
// Uploads are the inputs that change between such steps: a deferred stream
// copies them into pinned staging memory at once and records a copy from
// there, which the graph repeats with the new bytes. Because a graph is used
// only for a tape identical to the one it was captured from, a replay is
// exactly the work the tape describes; nothing is keyed by batch size or
// guessed. Side streams ([Stream.NewSide]) record into their primary's tape,
// so a fork and join become the graph's edges.
package cuda
