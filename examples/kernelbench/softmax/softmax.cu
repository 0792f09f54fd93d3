// Softmax over each row, for KernelBench level 1 problem 23 (spec: softmax.toml).
//     extern "C" int softmax_fwd(const float* x, float* y, int rows, int cols, cudaStream_t stream);
// x, y: [rows, cols] fp32, contiguous. One block per row, three passes over it: the row's maximum, the
// sum of exp(x - max) (accumulated in double), then y = exp(x - max) / sum.
#include <cuda_runtime.h>

#include <cmath>

namespace {

constexpr int THREADS = 512;
constexpr unsigned FULL_MASK = 0xffffffffu;

// op over the block's v; every thread gets the result. identity: op(identity, x) == x.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T partial[THREADS / 32];
    __shared__ T result;
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(FULL_MASK, v, offset));
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        T w = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : identity;
        for (int offset = 16; offset > 0; offset /= 2) w = op(w, __shfl_xor_sync(FULL_MASK, w, offset));
        if (threadIdx.x == 0) result = w;
    }
    __syncthreads();
    return result;
}

struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    __device__ double operator()(double a, double b) const { return a + b; }
};

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    const float* row = x + size_t(blockIdx.x) * cols;
    float* out = y + size_t(blockIdx.x) * cols;
    float row_max = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += THREADS) row_max = fmaxf(row_max, row[i]);
    row_max = block_reduce(row_max, Max(), -INFINITY);
    double sum = 0.0;
    for (int i = threadIdx.x; i < cols; i += THREADS) sum += double(expf(row[i] - row_max));
    const double inv_sum = 1.0 / block_reduce(sum, Sum(), 0.0);
    for (int i = threadIdx.x; i < cols; i += THREADS) out[i] = float(double(expf(row[i] - row_max)) * inv_sum);
}

}  // namespace

extern "C" int softmax_fwd(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return cudaSuccess;  // nothing to write
    softmax_kernel<<<rows, THREADS, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
