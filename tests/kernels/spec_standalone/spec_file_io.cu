// expect: check:forbidden-call, check:single-file, check:imported-symbols
// why: includes <cstdio> and reads a file from the host side of the entry point (the counterpart of file_io.cu)
#include <cstdio>
#include <cuda_runtime.h>

extern "C" int softmax_fwd(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    // A cheat could read answers or settings left on disk; any file access is forbidden.
    FILE* f = std::fopen("/proc/self/cmdline", "r");
    if (f != nullptr) std::fclose(f);
    (void)x;
    (void)y;
    (void)rows;
    (void)cols;
    (void)stream;
    return cudaErrorNotSupported;
}
