// Depthwise 2D convolution (one k x k filter per channel, zero padding, no bias), for KernelBench level 1
// problem 82 (spec: depthwise_conv.toml).
//     extern "C" int depthwise_conv2d(const float* x, const float* w, float* y, int batch, int channels,
//                                     int height, int width, int kernel_size, int stride, int padding,
//                                     cudaStream_t stream);
// x: [batch, channels, height, width]; w: [channels, 1, k, k]; y: [batch, channels, out_h, out_w] with
// out = (in + 2 * padding - k) / stride + 1; fp32, contiguous. One thread per output element, the k x k
// products summed in double.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void depthwise_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                 int channels, int height, int width, int k, int stride, int padding, int out_h,
                                 int out_w, int64_t total) {
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
        const int ow = int(idx % out_w);
        const int oh = int(idx / out_w % out_h);
        const int64_t plane = idx / (int64_t(out_w) * out_h);  // batch * channels + channel
        const int c = int(plane % channels);
        const float* in = x + plane * height * width;
        const float* filter = w + int64_t(c) * k * k;
        double sum = 0.0;
        for (int kh = 0; kh < k; ++kh) {
            const int ih = oh * stride - padding + kh;
            if (ih < 0 || ih >= height) continue;
            for (int kw = 0; kw < k; ++kw) {
                const int iw = ow * stride - padding + kw;
                if (iw < 0 || iw >= width) continue;
                sum += double(in[int64_t(ih) * width + iw]) * filter[kh * k + kw];
            }
        }
        y[idx] = float(sum);
    }
}

}  // namespace

extern "C" int depthwise_conv2d(const float* x, const float* w, float* y, int batch, int channels, int height,
                                int width, int kernel_size, int stride, int padding, cudaStream_t stream) {
    if (batch < 0 || channels < 0 || height < 0 || width < 0 || kernel_size < 1 || stride < 1 || padding < 0)
        return cudaErrorInvalidValue;
    const int out_h = (height + 2 * padding - kernel_size) / stride + 1;
    const int out_w = (width + 2 * padding - kernel_size) / stride + 1;
    if (out_h <= 0 || out_w <= 0) return cudaErrorInvalidValue;
    const int64_t total = int64_t(batch) * channels * out_h * out_w;
    if (total == 0) return cudaSuccess;  // nothing to write
    constexpr int threads = 256;
    const int64_t wanted = (total + threads - 1) / threads;
    depthwise_kernel<<<int(wanted < 65536 ? wanted : 65536), threads, 0, stream>>>(
        x, w, y, channels, height, width, kernel_size, stride, padding, out_h, out_w, total);
    return cudaGetLastError();
}
