// C = A·B for square fp32 matrices, for KernelBench level 1 problem 1 (spec: matmul.toml).
//     extern "C" int matmul_fwd(const float* a, const float* b, float* c, int n, cudaStream_t stream);
// a, b, c: [n, n] row-major, contiguous. Plain shared-memory tiling: a 64 x 64 tile of C per block of
// 256 threads, 4 x 4 outputs per thread, K in steps of 16. Each step's 16 products are summed in fp32
// and added to a double accumulator, so the error does not grow with n.
#include <cuda_runtime.h>

namespace {

constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;
constexpr int THREADS = (BM / TM) * (BN / TN);

__global__ void __launch_bounds__(THREADS) matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                                         float* __restrict__ c, int n) {
    __shared__ float a_tile[BK][BM + 1];  // transposed: a_tile[k][m]
    __shared__ float b_tile[BK][BN];
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    double acc[TM][TN] = {};
    for (int k0 = 0; k0 < n; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK, r = row0 + m, col = k0 + k;
            a_tile[k][m] = r < n && col < n ? a[size_t(r) * n + col] : 0.f;
        }
        for (int i = threadIdx.x; i < BK * BN; i += THREADS) {
            const int k = i / BN, j = i % BN, r = k0 + k, col = col0 + j;
            b_tile[k][j] = r < n && col < n ? b[size_t(r) * n + col] : 0.f;
        }
        __syncthreads();
        float part[TM][TN] = {};
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) av[i] = a_tile[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) bv[j] = b_tile[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] += part[i][j];
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = col0 + tx * TN + j;
            if (r < n && col < n) c[size_t(r) * n + col] = float(acc[i][j]);
        }
    }
}

}  // namespace

extern "C" int matmul_fwd(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;  // nothing to write
    const dim3 grid((n + BN - 1) / BN, (n + BM - 1) / BM);
    matmul_kernel<<<grid, THREADS, 0, stream>>>(a, b, c, n);
    return cudaGetLastError();
}
