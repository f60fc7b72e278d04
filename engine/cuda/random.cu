// Random numbers on the device: Dropout's masks in training graphs (ops/dropout.h's draws, the
// same as the cpu's) and their gradient.
#include <cstdint>

#include "engine/cuda/grid.h"
#include "engine/cuda/launch.h"
#include "ops/dropout.h"

namespace dw::engine::cuda {

namespace {

__global__ void dropoutKernel(const float* x, int64_t n, uint64_t key, uint64_t first, double ratio,
                              float scale, float* y, uint8_t* mask) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = ops::dropoutKeeps(key, first + static_cast<uint64_t>(i), ratio);
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.f;
  }
}

__global__ void dropoutGradKernel(const float* dy, const uint8_t* mask, int64_t n, float scale,
                                  float* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = mask[i] ? dy[i] * scale : 0.f;
}

}  // namespace

void launchDropout(const float* x, int64_t n, uint64_t key, uint64_t first, double ratio,
                   float scale, float* y, uint8_t* mask, cudaStream_t s) {
  if (n > 0)
    dropoutKernel<<<blocksFor(n), kThreads, 0, s>>>(x, n, key, first, ratio, scale, y, mask);
}

void launchDropoutGrad(const float* dy, const uint8_t* mask, int64_t n, float scale, float* dx,
                       cudaStream_t s) {
  if (n > 0) dropoutGradKernel<<<blocksFor(n), kThreads, 0, s>>>(dy, mask, n, scale, dx);
}

}  // namespace dw::engine::cuda
