package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrOutOfMemory matches (with errors.Is) an [Error] whose code is
// CUDA_ERROR_OUT_OF_MEMORY, so callers can size caches by trial.
var ErrOutOfMemory = errors.New("cuda: out of device memory")

// ErrClosed is returned by operations on a Device after Close.
var ErrClosed = errors.New("cuda: device is closed")

// CUresult codes this package interprets itself.
const (
	cuSuccess     = 0
	cuOutOfMemory = 2
)

// Error is a failed driver, NVRTC or cuBLAS call: Op names the call and its
// salient arguments, Name the status by its C name.
type Error struct {
	Op   string // e.g. "cuMemAlloc_v2(1073741824 bytes)"
	Code int    // the CUresult, nvrtcResult or cublasStatus_t value
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Log  string // compiler log, for NVRTC failures
}

// Error formats as "cuda: op: NAME" and appends the compiler log if any.
func (e *Error) Error() string {
	s := "cuda: " + e.Op + ": " + e.Name
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// Is lets errors.Is(err, ErrOutOfMemory) recognise a driver OOM.
func (e *Error) Is(target error) bool {
	return target == ErrOutOfMemory && e.Code == cuOutOfMemory && len(e.Name) > 5 && e.Name[:5] == "CUDA_"
}

// driverAPI holds the entry points of libcuda. Names with a _v2 variant are
// resolved newest first; the C signatures are noted where they matter.
type driverAPI struct {
	lib loadedLib

	getErrorName, init, driverGetVersion                                   uintptr
	deviceGet, deviceGetCount, deviceGetName, deviceGetAttribute           uintptr
	deviceTotalMem, primaryCtxRetain, primaryCtxRelease                    uintptr
	ctxSetCurrent, ctxSynchronize, memGetInfo                              uintptr
	memAlloc, memFree, memHostAlloc, memFreeHost                           uintptr
	memcpyHtoD, memcpyDtoH, memcpyDtoD, memcpyDtoDAsync                    uintptr
	memcpyHtoDAsync, memcpyDtoHAsync                                       uintptr
	memsetD8, memsetD32, memsetD8Async, memsetD32Async                     uintptr
	streamCreate, streamDestroy, streamSynchronize, streamWaitEvent        uintptr
	streamCreateWithPriority, ctxGetStreamPriorityRange                    uintptr
	eventCreate, eventDestroy, eventRecord, eventSynchronize, eventElapsed uintptr
	streamBeginCapture, streamEndCapture                                   uintptr
	graphInstantiate, graphLaunch, graphUpload, graphDestroy, graphExecDel uintptr
	moduleLoadData, moduleUnload, moduleGetFunction, moduleGetGlobal       uintptr
	funcGetAttribute, funcSetAttribute, launchKernel                       uintptr
}

// loadDriver resolves every entry point this package uses.
func loadDriver(lib loadedLib) (*driverAPI, error) {
	d := &driverAPI{lib: lib}
	table := []struct {
		dst   *uintptr
		names []string
	}{
		{&d.getErrorName, []string{"cuGetErrorName"}},
		{&d.init, []string{"cuInit"}},
		{&d.driverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.deviceGet, []string{"cuDeviceGet"}},
		{&d.deviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.deviceGetName, []string{"cuDeviceGetName"}},
		{&d.deviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.deviceTotalMem, []string{"cuDeviceTotalMem_v2", "cuDeviceTotalMem"}},
		{&d.primaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&d.primaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&d.ctxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.ctxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.memGetInfo, []string{"cuMemGetInfo_v2", "cuMemGetInfo"}},
		{&d.memAlloc, []string{"cuMemAlloc_v2", "cuMemAlloc"}},
		{&d.memFree, []string{"cuMemFree_v2", "cuMemFree"}},
		{&d.memHostAlloc, []string{"cuMemHostAlloc"}},
		{&d.memFreeHost, []string{"cuMemFreeHost"}},
		{&d.memcpyHtoD, []string{"cuMemcpyHtoD_v2", "cuMemcpyHtoD"}},
		{&d.memcpyDtoH, []string{"cuMemcpyDtoH_v2", "cuMemcpyDtoH"}},
		{&d.memcpyDtoD, []string{"cuMemcpyDtoD_v2", "cuMemcpyDtoD"}},
		{&d.memcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"}},
		{&d.memcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync"}},
		{&d.memcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync"}},
		{&d.memsetD8, []string{"cuMemsetD8_v2", "cuMemsetD8"}},
		{&d.memsetD32, []string{"cuMemsetD32_v2", "cuMemsetD32"}},
		{&d.memsetD8Async, []string{"cuMemsetD8Async"}},
		{&d.memsetD32Async, []string{"cuMemsetD32Async"}},
		{&d.streamCreate, []string{"cuStreamCreate"}},
		{&d.streamCreateWithPriority, []string{"cuStreamCreateWithPriority"}},
		{&d.ctxGetStreamPriorityRange, []string{"cuCtxGetStreamPriorityRange"}},
		{&d.streamDestroy, []string{"cuStreamDestroy_v2", "cuStreamDestroy"}},
		{&d.streamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.streamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&d.eventCreate, []string{"cuEventCreate"}},
		{&d.eventDestroy, []string{"cuEventDestroy_v2", "cuEventDestroy"}},
		{&d.eventRecord, []string{"cuEventRecord"}},
		{&d.eventSynchronize, []string{"cuEventSynchronize"}},
		{&d.eventElapsed, []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}},
		{&d.streamBeginCapture, []string{"cuStreamBeginCapture_v2", "cuStreamBeginCapture"}},
		{&d.streamEndCapture, []string{"cuStreamEndCapture"}},
		{&d.graphInstantiate, []string{"cuGraphInstantiateWithFlags"}},
		{&d.graphLaunch, []string{"cuGraphLaunch"}},
		{&d.graphUpload, []string{"cuGraphUpload"}},
		{&d.graphDestroy, []string{"cuGraphDestroy"}},
		{&d.graphExecDel, []string{"cuGraphExecDestroy"}},
		{&d.moduleLoadData, []string{"cuModuleLoadData"}},
		{&d.moduleUnload, []string{"cuModuleUnload"}},
		{&d.moduleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.moduleGetGlobal, []string{"cuModuleGetGlobal_v2", "cuModuleGetGlobal"}},
		{&d.funcGetAttribute, []string{"cuFuncGetAttribute"}},
		{&d.funcSetAttribute, []string{"cuFuncSetAttribute"}},
		{&d.launchKernel, []string{"cuLaunchKernel"}},
	}
	for _, e := range table {
		p, err := symbol(lib, e.names...)
		if err != nil {
			return nil, err
		}
		*e.dst = p
	}
	return d, nil
}

// errorName asks the driver for the C name of a CUresult.
func (d *driverAPI) errorName(code uint32) string {
	var p uintptr
	if r := call(d.getErrorName, uintptr(code), uintptr(unsafe.Pointer(&p))); r != 0 || p == 0 {
		return fmt.Sprintf("CUresult(%d)", code)
	}
	return goString(p)
}

// check turns a CUresult into an *Error naming op; op is only formatted on
// failure, so the success path does not allocate.
func (d *driverAPI) check(r uintptr, op string, args ...any) error {
	code := uint32(r)
	if code == cuSuccess {
		return nil
	}
	if len(args) > 0 {
		op = fmt.Sprintf(op, args...)
	}
	return &Error{Op: op, Code: int(code), Name: d.errorName(code)}
}
