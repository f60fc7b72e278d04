#include <cmath>
#include <limits>

#include "engine/cuda/cuda.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/runtime.h"

namespace dw::engine::cuda {

namespace {

class CudaTrainingOps : public TrainingOps {
 public:
  explicit CudaTrainingOps(CudaBackend& b) : be_(b) {}

  Result<Tensor> zeros(const Shape& shape) override {
    const size_t bytes = static_cast<size_t>(numElements(shape)) * sizeof(float);
    auto buf = be_.allocate(bytes);
    if (!buf) return buf.status();
    Tensor t(DType::kFloat, shape, *buf);
    DW_CUDA_OK(check(cudaMemsetAsync(t.raw(), 0, bytes, be_.stream()), "zeroing"));
    return t;
  }
  Status addInto(Tensor& acc, const Tensor& x) override {
    if (acc.size() != x.size()) return Status::error("cuda: accumulating tensors of other sizes");
    launchAddInto(acc.data<float>(), x.data<float>(), acc.size(), be_.stream());
    return launched("gradient accumulation");
  }
  Status scale(Tensor& x, float factor) override {
    launchScale(x.data<float>(), x.size(), factor, be_.stream());
    return launched("gradient scaling");
  }
  Result<double> norm(const std::vector<Tensor*>& xs, double p) override {
    const bool inf = p <= 0 || std::isinf(p);
    auto acc = zeros({1});
    if (!acc) return acc.status();
    FloatList l;
    for (size_t i = 0; i < xs.size(); ++i) {
      l.x[l.count] = xs[i]->data<float>();
      l.n[l.count++] = xs[i]->size();
      if (l.count == kListed || i + 1 == xs.size()) {
        launchNormAccumulate(l, inf ? 0.f : static_cast<float>(p), acc->data<float>(),
                             be_.stream());
        l.count = 0;
      }
    }
    DW_CUDA_OK(launched("gradient norm"));
    float h = 0;
    DW_CUDA_OK(
        check(cudaMemcpyAsync(&h, acc->raw(), sizeof h, cudaMemcpyDeviceToHost, be_.stream()),
              "reading the gradient norm"));
    DW_CUDA_OK(check(cudaStreamSynchronize(be_.stream()), "gradient norm"));
    if (inf) return static_cast<double>(h);
    return p == 2 ? std::sqrt(static_cast<double>(h)) : std::pow(static_cast<double>(h), 1.0 / p);
  }
  Status adam(const training::AdamScalars& a, const std::vector<Update>& ts) override {
    return listed(ts, "Adam update", [&](const UpdateList& l) { launchAdam(a, l, be_.stream()); });
  }
  Status sgd(const ops::SgdScalars& k, const std::vector<Update>& ts) override {
    return listed(ts, "SGD update", [&](const UpdateList& l) { launchSgd(k, l, be_.stream()); });
  }
  Status adagrad(const ops::AdagradScalars& k, const std::vector<Update>& ts) override {
    return listed(ts, "Adagrad update",
                  [&](const UpdateList& l) { launchAdagrad(k, l, be_.stream()); });
  }
  Status rmsprop(const ops::RmsPropScalars& k, const std::vector<Update>& ts) override {
    return listed(ts, "RMSprop update",
                  [&](const UpdateList& l) { launchRmsProp(k, l, be_.stream()); });
  }

 private:
  // Launches `launch` for each kListed of the tensors.
  template <class Launch>
  Status listed(const std::vector<Update>& ts, const char* what, Launch launch) {
    UpdateList l;
    for (size_t i = 0; i < ts.size(); ++i) {
      const Update& t = ts[i];
      l.w[l.count] = t.w->data<float>();
      l.g[l.count] = t.g->data<float>();
      for (int k = 0; k < 3; ++k)
        l.s[k][l.count] = t.state[k] ? t.state[k]->data<float>() : nullptr;
      l.n[l.count++] = t.w->size();
      if (l.count == kListed || i + 1 == ts.size()) {
        launch(l);
        l.count = 0;
      }
    }
    return launched(what);
  }

  CudaBackend& be_;
};

}  // namespace

std::unique_ptr<TrainingOps> trainingOps(Backend& backend) {
  if (backend.memory() != Device::kCuda) return nullptr;
  return std::make_unique<CudaTrainingOps>(cudaBackend(backend));
}

}  // namespace dw::engine::cuda
