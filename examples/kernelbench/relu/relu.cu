// ReLU, y = max(x, 0), for KernelBench level 1 problem 19 (spec: relu.toml). A plain grid-stride loop.
//     extern "C" int relu_fwd(const float* x, float* y, int64_t n, cudaStream_t stream);
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = fmaxf(x[i], 0.f);
}

}  // namespace

extern "C" int relu_fwd(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    constexpr int threads = 256;
    const int64_t wanted = (n + threads - 1) / threads;
    relu_kernel<<<int(wanted < 65536 ? wanted : 65536), threads, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
