// saxpy.cu: y = a*x + y in float32, the smallest real kernel: tests use it
// to check launches, arguments and graph replay against CPU values.

// saxpy_f32 sets y[i] = fmaf(a, x[i], y[i]) for i < n (grid-stride loop).
extern "C" __global__ void saxpy_f32(float* __restrict__ y, const float* __restrict__ x,
                                     float a, unsigned long long n)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = fmaf(a, x[i], y[i]);
    }
}
