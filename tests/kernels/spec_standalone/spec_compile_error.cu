// expect: build
// why: a type error in the entry point (the counterpart of compile_error.cu for the softmax spec)
#include <cuda_runtime.h>

extern "C" int softmax_fwd(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    float* wrong = x;  // const float* does not convert to float*
    (void)wrong;
    (void)y;
    (void)rows;
    (void)cols;
    (void)stream;
    return 0;
}
