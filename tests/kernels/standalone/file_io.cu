// expect: check:forbidden-call, check:single-file, check:imported-symbols
// why: includes <cstdio> and reads a file from the host side of the entry point
#include <cstdio>
#include <cuda_runtime.h>

extern "C" int kstui_attention_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int batch,
                                   int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                                   float softmax_scale, int causal, int dtype, cudaStream_t stream) {
    // A cheat could read answers or settings left on disk; any file access is forbidden.
    FILE* f = std::fopen("/proc/self/cmdline", "r");
    if (f != nullptr) std::fclose(f);
    return cudaErrorNotSupported;
}
