// expect: build
// why: uses an undeclared variable; the build must fail with file:line and nvcc's message
#include <cuda_runtime.h>

__global__ void copy_q(const unsigned short* q, unsigned short* o, size_t n) {
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) o[i] = q[i] * undeclared_scale;
}

extern "C" int kstui_attention_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int batch,
                                   int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                                   float softmax_scale, int causal, int dtype, cudaStream_t stream) {
    const size_t n = size_t(batch) * seqlen_q * heads_q * head_dim;
    copy_q<<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<const unsigned short*>(q),
                                                        static_cast<unsigned short*>(o), n);
    return cudaGetLastError();
}
