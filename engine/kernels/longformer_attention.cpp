// LongformerAttention (com.microsoft; ONNX Runtime runs it only on its GPU): Longformer's
// self-attention. input ([B, S, hidden]) times weight ([hidden, 3 * hidden]) plus bias gives the
// query, key and value of each of num_heads heads. A token attends to the tokens within `window`
// positions of it on either side, and to every global token (global[b, j] = 1); a global token
// attends to all tokens instead, through the query, key and value of global_weight and
// global_bias. mask ([B, S], 0 to keep, negative to mask) is added to each key's score; scores
// are scaled by 1/sqrt(head size). As in Hugging Face's Longformer, a global token within a
// window counts once.
#include <algorithm>
#include <cmath>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

class LongformerAttention : public Kernel {
 public:
  explicit LongformerAttention(const KernelInit& init)
      : heads_(init.attrs.getInt("num_heads", 0)), window_(init.attrs.getInt("window", -1)) {
    if (heads_ <= 0) fail("LongformerAttention needs num_heads > 0");
    if (window_ < 0) fail("LongformerAttention needs window >= 0");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat || x.rank() != 3)
      return Status::error("input must be float32 [batch, sequence, hidden], got " +
                           shapeToString(x.shape()));
    const int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), N = heads_;
    if (D % N != 0)
      return Status::error("hidden size " + std::to_string(D) + " is not a multiple of num_heads " +
                           std::to_string(N));
    const int64_t Hs = D / N;
    auto check = [&](size_t i, const char* name, DType t, const Shape& want) {
      const Tensor& v = ctx.input(i);
      if (v.dtype() != t || v.shape() != want)
        return Status::error(std::string(name) + " must be " + dtypeName(t) + " " +
                             shapeToString(want) + ", got " + dtypeName(v.dtype()) + " " +
                             shapeToString(v.shape()));
      return Status();
    };
    DW_RETURN_IF_ERROR(check(1, "weight", DType::kFloat, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(2, "bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(3, "mask", DType::kFloat, {B, S}));
    DW_RETURN_IF_ERROR(check(4, "global_weight", DType::kFloat, {D, 3 * D}));
    DW_RETURN_IF_ERROR(check(5, "global_bias", DType::kFloat, {3 * D}));
    DW_RETURN_IF_ERROR(check(6, "global", DType::kInt32, {B, S}));
    const std::vector<float> local = project(x, ctx.input(1), ctx.input(2));
    const std::vector<float> global = project(x, ctx.input(4), ctx.input(5));
    const float* mask = ctx.input(3).data<float>();
    const int32_t* isGlobal = ctx.input(6).data<int32_t>();
    DW_ALLOC(y, ctx.output(0, DType::kFloat, {B, S, D}));
    const double scale = 1.0 / std::sqrt(static_cast<double>(Hs));
    std::vector<double> w(S);
    std::vector<int64_t> keys;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i) {
        const bool g = isGlobal[b * S + i] != 0;
        // The keys this token reads: all of them (global), or its window and the global ones.
        keys.clear();
        for (int64_t j = 0; j < S; ++j)
          if (g || isGlobal[b * S + j] != 0 || std::abs(i - j) <= window_) keys.push_back(j);
        const std::vector<float>& p = g ? global : local;
        for (int64_t n = 0; n < N; ++n) {
          auto at = [&](int64_t t, int part) {
            return &p[(b * S + t) * 3 * D + part * D + n * Hs];
          };
          const float* q = at(i, 0);
          double top = -INFINITY;
          for (size_t k = 0; k < keys.size(); ++k) {
            const float* kj = at(keys[k], 1);
            double s = 0;
            for (int64_t h = 0; h < Hs; ++h) s += static_cast<double>(q[h]) * kj[h];
            w[k] = s * scale + mask[b * S + keys[k]];
            top = std::max(top, w[k]);
          }
          double sum = 0;
          for (size_t k = 0; k < keys.size(); ++k) sum += (w[k] = std::exp(w[k] - top));
          float* out = y->data<float>() + (b * S + i) * D + n * Hs;
          for (int64_t h = 0; h < Hs; ++h) {
            double acc = 0;
            for (size_t k = 0; k < keys.size(); ++k) acc += w[k] * at(keys[k], 2)[h];
            out[h] = static_cast<float>(acc / sum);
          }
        }
      }
    return Status();
  }

 private:
  // x [B, S, D] times W [D, 3D] plus bias: [B * S, 3D], queries, keys, values.
  static std::vector<float> project(const Tensor& x, const Tensor& W, const Tensor& bias) {
    const int64_t rows = x.dim(0) * x.dim(1), D = x.dim(2), out = 3 * D;
    std::vector<float> p(rows * out);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < out; ++j) {
        double acc = bias.data<float>()[j];
        for (int64_t k = 0; k < D; ++k)
          acc += static_cast<double>(x.data<float>()[r * D + k]) * W.data<float>()[k * out + j];
        p[r * out + j] = static_cast<float>(acc);
      }
    return p;
  }

  int64_t heads_, window_;
};

}  // namespace

void addLongformerKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "LongformerAttention", 1, kMaxOpset, &makeKernel<LongformerAttention>,
        false, dw::kMicrosoftDomain);
}

}  // namespace dw::engine
