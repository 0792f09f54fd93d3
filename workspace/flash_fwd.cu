// kstui starting kernel: attention forward (FlashAttention-style), one file, CUDA toolkit headers only.
//
// Computes, per batch b and query head h (GQA/MQA: key/value head h / (Hq / Hkv)):
//     S = softmax_scale * Q K^T      (causal: query i sees key j iff j <= i + (Sk - Sq), bottom-right)
//     O = softmax(S) V               lse = log(sum_j exp(S_ij))   (natural log, fp32)
// A query row that sees no key gets O = 0 and lse = -inf.
//
// Algorithm (FlashAttention-2 forward, written for clarity rather than peak speed):
//   * One block of 4 warps per (64-row query tile, head, batch). Warp w owns query rows 16w..16w+15
//     of the tile for the whole computation, so its slices of S, P and O need no block barrier.
//   * The Q tile is staged once in shared memory; K and V tiles of 64 keys stream through shared
//     memory with cp.async (V of tile t loads while S of tile t is computed, K of tile t+1 while
//     P V of tile t is computed). Rows and columns outside the tensor are zero-filled, so padded
//     lanes contribute exact zeros and never NaN.
//   * S = Q K^T on tensor cores (nvcuda::wmma 16x16x16, fp32 accumulate) into a fp32 smem tile.
//   * Online softmax in plain CUDA, two lanes per query row, in the log2 domain (log2(e) is folded
//     into the scale so exp2f can be used): keep the running max m and running sum l per row; for
//     a new tile, m' = max(m, rowmax), P = exp2(S - m'), l' = l * exp2(m - m') + rowsum(P), and
//     the O accumulated so far is rescaled by exp2(m - m'). While a row has seen no visible key,
//     m stays -inf and exponents are taken relative to 0, so exp2(-inf - -inf) is never formed.
//   * P is rounded to the input type in smem; O += P V on tensor cores into a fp32 smem tile.
//   * At the end O / l is written out, and lse = m * ln(2) + ln(l).
//   * Causal: K tiles past the last key the tile's last query can see are never loaded.
//   * Head dims: any multiple of 8 up to 256; the tile width DP is the next of 64/96/128/192/256 and
//     columns past head_dim are zero in shared memory.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int BLOCK_M = 64;  // query rows per block
constexpr int BLOCK_N = 64;  // keys per K/V tile
constexpr int WARPS = BLOCK_M / 16;  // each warp owns 16 query rows
constexpr int THREADS = WARPS * 32;
constexpr int MAX_HEAD_DIM = 256;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr unsigned FULL_MASK = 0xffffffffu;

// Shared-memory layout for a tile width DP (head_dim rounded up). Pitches are padded so that
// consecutive rows start in different banks; every sub-buffer and every 16-row slice stays 32-byte
// aligned, as wmma requires.
template <int DP>
struct Smem {
    static constexpr int QKV_PITCH = DP + 8;      // elements (2 bytes each)
    static constexpr int S_PITCH = BLOCK_N + 4;   // floats
    static constexpr int P_PITCH = BLOCK_N + 8;   // elements
    static constexpr int O_PITCH = DP + 4;        // floats
    static constexpr size_t Q_OFF = 0;
    static constexpr size_t K_OFF = Q_OFF + size_t(BLOCK_M) * QKV_PITCH * 2;
    static constexpr size_t V_OFF = K_OFF + size_t(BLOCK_N) * QKV_PITCH * 2;
    static constexpr size_t S_OFF = V_OFF + size_t(BLOCK_N) * QKV_PITCH * 2;
    static constexpr size_t P_OFF = S_OFF + size_t(BLOCK_M) * S_PITCH * 4;
    static constexpr size_t O_OFF = P_OFF + size_t(BLOCK_M) * P_PITCH * 2;
    static constexpr size_t INV_L_OFF = O_OFF + size_t(BLOCK_M) * O_PITCH * 4;
    static constexpr size_t BYTES = INV_L_OFF + size_t(BLOCK_M) * 4;
    static_assert(BYTES <= 227 * 1024, "exceeds the 227 KB of shared memory a block may use");
};

struct Params {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    float* lse;
    int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    float scale_log2;  // softmax_scale * log2(e)
    int causal;
    int num_q_tiles;
};

template <typename T>
__device__ unsigned short to_bits(float x);
template <>
__device__ unsigned short to_bits<__nv_bfloat16>(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
template <>
__device__ unsigned short to_bits<__half>(float x) { return __half_as_ushort(__float2half(x)); }

template <typename T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_float<__half>(float x) { return __float2half(x); }

// 16-byte asynchronous global -> shared copy; with valid == false nothing is read and the 16 bytes
// are zero-filled.
__device__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
                 : "memory");
}
__device__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Stage a ROWS x DP tile of one head (row r at src + r * row_stride) into shared memory. Rows from
// valid_rows on and columns from head_dim on are zero-filled.
template <typename T, int ROWS, int DP>
__device__ void load_tile_async(T* tile, const T* src, size_t row_stride, int valid_rows, int head_dim) {
    constexpr int CHUNKS = DP / 8;  // 16-byte chunks per row
    for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) {
        const int r = idx / CHUNKS;
        const int c = (idx % CHUNKS) * 8;
        const bool valid = r < valid_rows && c < head_dim;
        cp_async_16(tile + r * Smem<DP>::QKV_PITCH + c, valid ? src + r * row_stride + c : src, valid);
    }
}

template <typename T, int DP>
__global__ void __launch_bounds__(THREADS) flash_fwd_kernel(const Params p) {
    using L = Smem<DP>;
    extern __shared__ __align__(128) unsigned char smem[];
    T* q_tile = reinterpret_cast<T*>(smem + L::Q_OFF);
    T* k_tile = reinterpret_cast<T*>(smem + L::K_OFF);
    T* v_tile = reinterpret_cast<T*>(smem + L::V_OFF);
    float* s_tile = reinterpret_cast<float*>(smem + L::S_OFF);
    T* p_tile = reinterpret_cast<T*>(smem + L::P_OFF);
    float* o_acc = reinterpret_cast<float*>(smem + L::O_OFF);
    float* inv_l = reinterpret_cast<float*>(smem + L::INV_L_OFF);

    const T* q = static_cast<const T*>(p.q);
    const T* k = static_cast<const T*>(p.k);
    const T* v = static_cast<const T*>(p.v);
    T* o = static_cast<T*>(p.o);

    // Block -> (q tile, batch, head). The last query tiles (the most keys under causality) go first.
    const int batch_heads = p.batch * p.heads_q;
    const int q_tile_idx = p.num_q_tiles - 1 - static_cast<int>(blockIdx.x) / batch_heads;
    const int b = static_cast<int>(blockIdx.x) % batch_heads / p.heads_q;
    const int h = static_cast<int>(blockIdx.x) % p.heads_q;
    const int h_kv = h / (p.heads_q / p.heads_kv);
    const int q0 = q_tile_idx * BLOCK_M;

    const size_t q_row_stride = size_t(p.heads_q) * p.head_dim;
    const size_t kv_row_stride = size_t(p.heads_kv) * p.head_dim;
    const T* q_src = q + (size_t(b) * p.seqlen_q + q0) * q_row_stride + size_t(h) * p.head_dim;
    const T* k_src = k + size_t(b) * p.seqlen_k * kv_row_stride + size_t(h_kv) * p.head_dim;
    const T* v_src = v + size_t(b) * p.seqlen_k * kv_row_stride + size_t(h_kv) * p.head_dim;

    // Causal, bottom-right aligned: query i sees key j iff j <= i + causal_offset.
    const int causal_offset = p.seqlen_k - p.seqlen_q;
    const int last_q = min(q0 + BLOCK_M, p.seqlen_q) - 1;
    const int kv_end = p.causal ? min(p.seqlen_k, last_q + causal_offset + 1) : p.seqlen_k;
    const int num_kv_tiles = kv_end > 0 ? (kv_end + BLOCK_N - 1) / BLOCK_N : 0;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int row0 = warp * 16;  // this warp's first row within the tile
    // Softmax and epilogue bookkeeping: lanes 2r and 2r+1 share row r of the warp's 16 rows.
    const int my_row = row0 + lane / 2;
    const int side = lane % 2;  // which lane of the pair: it takes columns side, side + 2, ...
    const int q_row = q0 + my_row;
    const int key_limit = p.causal ? min(p.seqlen_k, q_row + causal_offset + 1) : p.seqlen_k;  // sees [0, key_limit)
    float row_max = -CUDART_INF_F;  // running max of the scaled scores, log2 domain
    float row_sum = 0.f;            // running sum of exp2(score - row_max)

    for (int i = lane; i < 16 * DP; i += 32) o_acc[(row0 + i / DP) * L::O_PITCH + i % DP] = 0.f;

    load_tile_async<T, BLOCK_M, DP>(q_tile, q_src, q_row_stride, p.seqlen_q - q0, p.head_dim);
    if (num_kv_tiles > 0) load_tile_async<T, BLOCK_N, DP>(k_tile, k_src, kv_row_stride, p.seqlen_k, p.head_dim);
    cp_async_commit();

    for (int tile = 0; tile < num_kv_tiles; ++tile) {
        const int k0 = tile * BLOCK_N;
        cp_async_wait_all();
        __syncthreads();  // K tile visible to every warp; every warp is done with the previous V tile
        load_tile_async<T, BLOCK_N, DP>(v_tile, v_src + k0 * kv_row_stride, kv_row_stride, p.seqlen_k - k0,
                                        p.head_dim);
        cp_async_commit();

        // S = Q K^T for this warp's 16 rows x 64 keys.
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag[BLOCK_N / 16];
#pragma unroll
            for (int n = 0; n < BLOCK_N / 16; ++n) wmma::fill_fragment(s_frag[n], 0.f);
#pragma unroll 2
            for (int kk = 0; kk < DP; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_frag;
                wmma::load_matrix_sync(q_frag, q_tile + row0 * L::QKV_PITCH + kk, L::QKV_PITCH);
#pragma unroll
                for (int n = 0; n < BLOCK_N / 16; ++n) {
                    // K^T as a column-major operand is K row-major: element (d, j) at k_tile[j][d].
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> k_frag;
                    wmma::load_matrix_sync(k_frag, k_tile + n * 16 * L::QKV_PITCH + kk, L::QKV_PITCH);
                    wmma::mma_sync(s_frag[n], q_frag, k_frag, s_frag[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < BLOCK_N / 16; ++n)
                wmma::store_matrix_sync(s_tile + row0 * L::S_PITCH + n * 16, s_frag[n], L::S_PITCH,
                                        wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax over this warp's 16 rows, two lanes per row.
        {
            float x[BLOCK_N / 2];
            float tile_max = -CUDART_INF_F;
#pragma unroll
            for (int c = 0; c < BLOCK_N / 2; ++c) {
                const int col = 2 * c + side;
                const bool visible = k0 + col < key_limit;
                x[c] = visible ? s_tile[my_row * L::S_PITCH + col] * p.scale_log2 : -CUDART_INF_F;
                tile_max = fmaxf(tile_max, x[c]);
            }
            tile_max = fmaxf(tile_max, __shfl_xor_sync(FULL_MASK, tile_max, 1));
            const float new_max = fmaxf(row_max, tile_max);
            // No visible key yet: take exponents relative to 0 (every term is exp2(-inf) = 0).
            const float ref = new_max == -CUDART_INF_F ? 0.f : new_max;
            const float alpha = exp2f(row_max - ref);  // rescales what was accumulated so far
            float tile_sum = 0.f;
#pragma unroll
            for (int c = 0; c < BLOCK_N / 2; ++c) {
                const float e = exp2f(x[c] - ref);
                tile_sum += e;
                p_tile[my_row * L::P_PITCH + 2 * c + side] = from_float<T>(e);
            }
            tile_sum += __shfl_xor_sync(FULL_MASK, tile_sum, 1);
            row_sum = row_sum * alpha + tile_sum;
            row_max = new_max;
            if (alpha != 1.f) {
#pragma unroll
                for (int c = 0; c < DP; c += 2) o_acc[my_row * L::O_PITCH + c + side] *= alpha;
            }
        }

        cp_async_wait_all();
        __syncthreads();  // V tile visible to every warp; every warp is done reading the K tile
        if (tile + 1 < num_kv_tiles)
            load_tile_async<T, BLOCK_N, DP>(k_tile, k_src + (k0 + BLOCK_N) * kv_row_stride, kv_row_stride,
                                            p.seqlen_k - (k0 + BLOCK_N), p.head_dim);
        cp_async_commit();

        // O += P V for this warp's 16 rows.
        {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> p_frag[BLOCK_N / 16];
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk)
                wmma::load_matrix_sync(p_frag[kk], p_tile + row0 * L::P_PITCH + kk * 16, L::P_PITCH);
#pragma unroll 2
            for (int c = 0; c < DP; c += 16) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag;
                wmma::load_matrix_sync(o_frag, o_acc + row0 * L::O_PITCH + c, L::O_PITCH, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v_frag;
                    wmma::load_matrix_sync(v_frag, v_tile + kk * 16 * L::QKV_PITCH + c, L::QKV_PITCH);
                    wmma::mma_sync(o_frag, p_frag[kk], v_frag, o_frag);
                }
                wmma::store_matrix_sync(o_acc + row0 * L::O_PITCH + c, o_frag, L::O_PITCH, wmma::mem_row_major);
            }
        }
    }
    cp_async_wait_all();  // no copy may land in shared memory after the block has exited

    // Epilogue: o = O / l, lse = ln(sum exp(scores)); a row that saw no key gets o = 0, lse = -inf.
    if (side == 0) {
        inv_l[my_row] = row_sum > 0.f ? 1.f / row_sum : 0.f;
        if (q_row < p.seqlen_q) {
            const float row_lse = row_sum > 0.f ? row_max * LN2 + logf(row_sum) : -CUDART_INF_F;
            p.lse[(size_t(b) * p.heads_q + h) * p.seqlen_q + q_row] = row_lse;
        }
    }
    __syncwarp();
    const int chunks = p.head_dim / 8;  // 16-byte chunks per output row
    for (int idx = lane; idx < 16 * chunks; idx += 32) {
        const int r = row0 + idx / chunks;
        const int c = idx % chunks * 8;
        const int out_row = q0 + r;
        if (out_row < p.seqlen_q) {
            const float* acc = o_acc + r * L::O_PITCH + c;
            const float scale = inv_l[r];
            unsigned packed[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                packed[e] = unsigned(to_bits<T>(acc[2 * e] * scale)) |
                            (unsigned(to_bits<T>(acc[2 * e + 1] * scale)) << 16);
            const size_t offset = ((size_t(b) * p.seqlen_q + out_row) * p.heads_q + h) * p.head_dim + c;
            *reinterpret_cast<uint4*>(o + offset) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
    }
}

template <typename T, int DP>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    const size_t smem_bytes = Smem<DP>::BYTES;
    cudaError_t err = cudaFuncSetAttribute(flash_fwd_kernel<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem_bytes));
    if (err != cudaSuccess) return err;
    const unsigned blocks = static_cast<unsigned>(p.num_q_tiles) * p.batch * p.heads_q;
    flash_fwd_kernel<T, DP><<<blocks, THREADS, smem_bytes, stream>>>(p);
    return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_head_dim(const Params& p, cudaStream_t stream) {
    if (p.head_dim <= 64) return launch<T, 64>(p, stream);
    if (p.head_dim <= 96) return launch<T, 96>(p, stream);
    if (p.head_dim <= 128) return launch<T, 128>(p, stream);
    if (p.head_dim <= 192) return launch<T, 192>(p, stream);
    return launch<T, 256>(p, stream);
}

bool aligned16(const void* ptr) { return reinterpret_cast<unsigned long long>(ptr) % 16 == 0; }

}  // namespace

extern "C" int kstui_attention_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int batch,
                                   int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                                   float softmax_scale, int causal, int dtype, cudaStream_t stream) {
    if (batch < 0 || seqlen_q < 0 || seqlen_k < 0 || heads_q <= 0 || heads_kv <= 0 || heads_q % heads_kv != 0)
        return cudaErrorInvalidValue;
    if (head_dim <= 0 || head_dim > MAX_HEAD_DIM || head_dim % 8 != 0) return cudaErrorInvalidValue;
    if (dtype != 0 && dtype != 1) return cudaErrorInvalidValue;
    if (batch == 0 || seqlen_q == 0) return cudaSuccess;  // no output to write
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr || lse == nullptr) return cudaErrorInvalidValue;
    // q, k, v and o move in 16-byte vectors.
    if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o)) return cudaErrorInvalidValue;

    Params p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.lse = lse;
    p.batch = batch;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.head_dim = head_dim;
    p.scale_log2 = softmax_scale * LOG2E;
    p.causal = causal != 0;
    p.num_q_tiles = (seqlen_q + BLOCK_M - 1) / BLOCK_M;
    if (static_cast<long long>(p.num_q_tiles) * batch * heads_q > 0x7fffffffLL) return cudaErrorInvalidValue;

    return dtype == 0 ? dispatch_head_dim<__nv_bfloat16>(p, stream) : dispatch_head_dim<__half>(p, stream);
}
