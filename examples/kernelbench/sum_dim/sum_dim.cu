// Sum over the middle dimension, for KernelBench level 1 problem 47 (spec: sum_dim.toml).
//     extern "C" int sum_dim1(const float* x, float* y, int outer, int reduce, int inner, cudaStream_t stream);
// x: [outer, reduce, inner]; y: [outer, 1, inner]; fp32, contiguous. One thread per output, walking the
// reduced dimension (neighbouring threads read neighbouring elements) with a double accumulator.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ y, int outer, int reduce, int inner) {
    const int64_t total = int64_t(outer) * inner;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t o = idx / inner, i = idx % inner;
        const float* column = x + o * reduce * inner + i;
        double sum = 0.0;
        for (int r = 0; r < reduce; ++r) sum += column[int64_t(r) * inner];
        y[idx] = float(sum);
    }
}

}  // namespace

extern "C" int sum_dim1(const float* x, float* y, int outer, int reduce, int inner, cudaStream_t stream) {
    if (outer < 0 || reduce < 0 || inner < 0) return cudaErrorInvalidValue;
    const int64_t total = int64_t(outer) * inner;
    if (total == 0) return cudaSuccess;  // nothing to write
    constexpr int threads = 256;
    const int64_t wanted = (total + threads - 1) / threads;
    sum_kernel<<<int(wanted < 65536 ? wanted : 65536), threads, 0, stream>>>(x, y, outer, reduce, inner);
    return cudaGetLastError();
}
