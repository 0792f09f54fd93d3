// Argmax over the middle dimension, for KernelBench level 1 problem 51 (spec: argmax.toml).
//     extern "C" int argmax_dim1(const float* x, int64_t* y, int outer, int reduce, int inner,
//                                cudaStream_t stream);
// x: [outer, reduce, inner] fp32; y: [outer, inner] int64; contiguous. One thread per output walks the
// reduced dimension and keeps the first index of the maximum (torch's choice on ties).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void argmax_kernel(const float* __restrict__ x, int64_t* __restrict__ y, int outer, int reduce,
                              int inner) {
    const int64_t total = int64_t(outer) * inner;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t o = idx / inner, i = idx % inner;
        const float* column = x + o * reduce * inner + i;
        float best = column[0];
        int64_t best_index = 0;
        for (int r = 1; r < reduce; ++r) {
            const float v = column[int64_t(r) * inner];
            if (v > best) {
                best = v;
                best_index = r;
            }
        }
        y[idx] = best_index;
    }
}

}  // namespace

extern "C" int argmax_dim1(const float* x, int64_t* y, int outer, int reduce, int inner, cudaStream_t stream) {
    if (outer < 0 || reduce < 1 || inner < 0) return cudaErrorInvalidValue;
    const int64_t total = int64_t(outer) * inner;
    if (total == 0) return cudaSuccess;  // nothing to write
    constexpr int threads = 256;
    const int64_t wanted = (total + threads - 1) / threads;
    argmax_kernel<<<int(wanted < 65536 ? wanted : 65536), threads, 0, stream>>>(x, y, outer, reduce, inner);
    return cudaGetLastError();
}
