// kstui starting kernel: RMSNorm forward, one file, CUDA toolkit headers only.
//
//     y[r, c] = x[r, c] * rsqrt(mean_c(x[r, :]^2) + eps) * weight[c]      (computed in fp32)
//
// x, y: [rows, cols]; weight: [cols]; all bf16 (dtype 0) or fp16 (dtype 1), contiguous.
//
// One block per row. Pass 1: each thread sums the squares of its strided share of the row, then a
// block reduction (warp shuffles, then one warp over the per-warp sums) gives the row's mean square.
// Pass 2 reads the row again (now in cache) and writes y. When cols is a multiple of 8 and the
// pointers are 16-byte aligned, every access moves 8 elements (16 bytes); otherwise one element.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr int MAX_THREADS = 1024;
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_float<__half>(float x) { return __float2half(x); }

// Eight elements moved as one 16-byte vector.
union Pack8 {
    uint4 vec;
    unsigned short bits[8];
};

template <typename T>
__device__ float bits_to_float(unsigned short b);
template <>
__device__ float bits_to_float<__nv_bfloat16>(unsigned short b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
template <>
__device__ float bits_to_float<__half>(unsigned short b) { return __half2float(__ushort_as_half(b)); }

template <typename T>
__device__ unsigned short float_to_bits(float x);
template <>
__device__ unsigned short float_to_bits<__nv_bfloat16>(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
template <>
__device__ unsigned short float_to_bits<__half>(float x) { return __half_as_ushort(__float2half(x)); }

// Sum of v over the block; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float warp_sums[MAX_THREADS / 32];
    __shared__ float total;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int warps = (blockDim.x + 31) / 32;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(FULL_MASK, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < warps ? warp_sums[lane] : 0.f;
        for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(FULL_MASK, s, offset);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

template <typename T>
__global__ void rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y, int cols,
                               float eps, bool vectorized) {
    const size_t row_start = size_t(blockIdx.x) * cols;
    const T* x_row = x + row_start;
    T* y_row = y + row_start;

    float sum_sq = 0.f;
    if (vectorized) {
        const uint4* xv = reinterpret_cast<const uint4*>(x_row);
        for (int i = threadIdx.x; i < cols / 8; i += blockDim.x) {
            Pack8 in;
            in.vec = xv[i];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float f = bits_to_float<T>(in.bits[e]);
                sum_sq += f * f;
            }
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float f = to_float(x_row[i]);
            sum_sq += f * f;
        }
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / float(cols) + eps);

    if (vectorized) {
        const uint4* xv = reinterpret_cast<const uint4*>(x_row);
        const uint4* wv = reinterpret_cast<const uint4*>(weight);
        uint4* yv = reinterpret_cast<uint4*>(y_row);
        for (int i = threadIdx.x; i < cols / 8; i += blockDim.x) {
            Pack8 in, w, out;
            in.vec = xv[i];
            w.vec = wv[i];
#pragma unroll
            for (int e = 0; e < 8; ++e)
                out.bits[e] = float_to_bits<T>(bits_to_float<T>(in.bits[e]) * inv_rms * bits_to_float<T>(w.bits[e]));
            yv[i] = out.vec;
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x)
            y_row[i] = from_float<T>(to_float(x_row[i]) * inv_rms * to_float(weight[i]));
    }
}

bool aligned16(const void* ptr) { return reinterpret_cast<unsigned long long>(ptr) % 16 == 0; }

// Enough threads that each moves about one vector (or element) per pass, 32 to 1024.
int threads_for(int work_items) {
    int threads = 32;
    while (threads < MAX_THREADS && threads < work_items) threads *= 2;
    return threads;
}

template <typename T>
cudaError_t launch(const void* x, const void* weight, void* y, int rows, int cols, float eps, cudaStream_t stream) {
    const bool vectorized = cols % 8 == 0 && aligned16(x) && aligned16(weight) && aligned16(y);
    const int threads = threads_for(vectorized ? cols / 8 : cols);
    rmsnorm_kernel<T><<<rows, threads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(weight),
                                                    static_cast<T*>(y), cols, eps, vectorized);
    return cudaGetLastError();
}

}  // namespace

extern "C" int kstui_rmsnorm_fwd(const void* x, const void* weight, void* y, int rows, int cols, float eps, int dtype,
                                 cudaStream_t stream) {
    if (rows < 0 || cols < 0 || (dtype != 0 && dtype != 1)) return cudaErrorInvalidValue;
    if (rows == 0 || cols == 0) return cudaSuccess;  // nothing to write
    if (x == nullptr || weight == nullptr || y == nullptr) return cudaErrorInvalidValue;
    return dtype == 0 ? launch<__nv_bfloat16>(x, weight, y, rows, cols, eps, stream)
                      : launch<__half>(x, weight, y, rows, cols, eps, stream);
}
