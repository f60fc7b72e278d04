// com.microsoft operators that no composition of ai.onnx operators expresses, so they have
// kernels of their own (the rest are function bodies, nodes/microsoft_domain.cpp): Inverse,
// MurmurHash3, DynamicTimeWarping and NGramRepeatBlock. Each follows ONNX Runtime's contrib
// definition; tests/golden/ort-contrib holds ONNX Runtime 1.30's outputs for them.
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// Inverse: the inverse of each square matrix in the last two axes ([..., n, n]), by Gauss-Jordan
// elimination with partial pivoting in double precision. A singular matrix is an error that says
// which one.
class Inverse : public Kernel {
 public:
  explicit Inverse(const KernelInit&) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
      return Status::error("X " + shapeToString(x.shape()) +
                           " must hold square matrices in its last two axes ([..., n, n])");
    const int64_t n = x.dim(x.rank() - 1), count = n ? x.size() / (n * n) : 0;
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      std::vector<double> a(n * n), inv(n * n);
      for (int64_t m = 0; m < count; ++m) {
        const T* src = x.data<T>() + m * n * n;
        for (int64_t i = 0; i < n * n; ++i) a[i] = static_cast<double>(src[i]);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) inv[i * n + j] = i == j;
        for (int64_t c = 0; c < n; ++c) {
          int64_t p = c;
          for (int64_t r = c + 1; r < n; ++r)
            if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
          if (a[p * n + c] == 0 || !std::isfinite(a[p * n + c]))
            return Status::error("matrix " + std::to_string(m) + " of X is singular");
          if (p != c)
            for (int64_t j = 0; j < n; ++j) {
              std::swap(a[p * n + j], a[c * n + j]);
              std::swap(inv[p * n + j], inv[c * n + j]);
            }
          const double d = 1.0 / a[c * n + c];
          for (int64_t j = 0; j < n; ++j) a[c * n + j] *= d, inv[c * n + j] *= d;
          for (int64_t r = 0; r < n; ++r) {
            const double f = a[r * n + c];
            if (r == c || f == 0) continue;
            for (int64_t j = 0; j < n; ++j) {
              a[r * n + j] -= f * a[c * n + j];
              inv[r * n + j] -= f * inv[c * n + j];
            }
          }
        }
        T* dst = y->data<T>() + m * n * n;
        for (int64_t i = 0; i < n * n; ++i) dst[i] = static_cast<T>(inv[i]);
      }
      return Status();
    });
  }
};

// MurmurHash3 (Austin Appleby's x86 32-bit variant) of each element's bytes: 4 for 32-bit
// types, 8 for 64-bit ones, the UTF-8 bytes of a string; from `seed`. Y is uint32 where
// `positive` (the default), else the same bits as int32.
uint32_t murmur3(const uint8_t* data, size_t len, uint32_t seed) {
  auto rotl = [](uint32_t v, int r) { return (v << r) | (v >> (32 - r)); };
  constexpr uint32_t c1 = 0xcc9e2d51, c2 = 0x1b873593;
  uint32_t h = seed;
  const size_t blocks = len / 4;
  for (size_t i = 0; i < blocks; ++i) {
    uint32_t k;
    std::memcpy(&k, data + 4 * i, 4);
    k *= c1;
    k = rotl(k, 15);
    k *= c2;
    h ^= k;
    h = rotl(h, 13);
    h = h * 5 + 0xe6546b64;
  }
  const uint8_t* tail = data + 4 * blocks;
  uint32_t k = 0;
  switch (len & 3) {
    case 3:
      k ^= uint32_t(tail[2]) << 16;
      [[fallthrough]];
    case 2:
      k ^= uint32_t(tail[1]) << 8;
      [[fallthrough]];
    case 1:
      k ^= tail[0];
      k *= c1;
      k = rotl(k, 15);
      k *= c2;
      h ^= k;
  }
  h ^= static_cast<uint32_t>(len);
  h ^= h >> 16;
  h *= 0x85ebca6b;
  h ^= h >> 13;
  h *= 0xc2b2ae35;
  h ^= h >> 16;
  return h;
}

class MurmurHash3 : public Kernel {
 public:
  explicit MurmurHash3(const KernelInit& init)
      : seed_(static_cast<uint32_t>(init.attrs.getInt("seed", 0))),
        positive_(init.attrs.getInt("positive", 1) != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    size_t width = 0;
    switch (x.dtype()) {
      case DType::kInt32:
      case DType::kUInt32:
      case DType::kFloat:
        width = 4;
        break;
      case DType::kInt64:
      case DType::kUInt64:
      case DType::kDouble:
        width = 8;
        break;
      case DType::kString:
        break;
      default:
        return Status::error(std::string("X is ") + dtypeName(x.dtype()) +
                             "; MurmurHash3 hashes int32, uint32, int64, uint64, float, double "
                             "or string tensors");
    }
    DW_ALLOC(y, ctx.output(0, positive_ ? DType::kUInt32 : DType::kInt32, x.shape()));
    uint32_t* out = static_cast<uint32_t*>(y->raw());
    if (x.dtype() == DType::kString) {
      for (int64_t i = 0; i < x.size(); ++i) {
        const std::string& s = x.strings()[i];
        out[i] = murmur3(reinterpret_cast<const uint8_t*>(s.data()), s.size(), seed_);
      }
    } else {
      const auto* bytes = static_cast<const uint8_t*>(x.raw());
      for (int64_t i = 0; i < x.size(); ++i) out[i] = murmur3(bytes + i * width, width, seed_);
    }
    return Status();
  }

 private:
  uint32_t seed_;
  bool positive_;
};

// DynamicTimeWarping: the cheapest monotonic path through a cost matrix ([rows, cols], or
// [1, rows, cols]) from its first cell to its last, stepping down, right or diagonally, as
// Whisper aligns tokens to audio frames: output [2, path length] int32, the row and the column
// of each cell on the path. Ties prefer, in order, the diagonal... as ONNX Runtime's does: a
// diagonal step only when strictly cheapest, then a step down only when strictly cheapest,
// else a step right.
class DynamicTimeWarping : public Kernel {
 public:
  explicit DynamicTimeWarping(const KernelInit&) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat) return Status::error("input must be float");
    if (!(x.rank() == 2 || (x.rank() == 3 && x.dim(0) == 1)))
      return Status::error("input " + shapeToString(x.shape()) +
                           " must be a cost matrix [rows, cols] or [1, rows, cols]");
    const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
    const float* c = x.data<float>();
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> cost((rows + 1) * (cols + 1), inf);
    std::vector<int8_t> trace((rows + 1) * (cols + 1), -1);
    auto at = [&](int64_t i, int64_t j) { return i * (cols + 1) + j; };
    cost[0] = 0;
    for (int64_t j = 1; j <= cols; ++j)
      for (int64_t i = 1; i <= rows; ++i) {
        const double c0 = cost[at(i - 1, j - 1)], c1 = cost[at(i - 1, j)], c2 = cost[at(i, j - 1)];
        double best;
        int8_t t;
        if (c0 < c1 && c0 < c2)
          best = c0, t = 0;
        else if (c1 < c0 && c1 < c2)
          best = c1, t = 1;
        else
          best = c2, t = 2;
        cost[at(i, j)] = c[(i - 1) * cols + (j - 1)] + best;
        trace[at(i, j)] = t;
      }
    for (int64_t j = 0; j <= cols; ++j) trace[at(0, j)] = 2;
    for (int64_t i = 0; i <= rows; ++i) trace[at(i, 0)] = 1;
    std::vector<std::pair<int32_t, int32_t>> path;
    for (int64_t i = rows, j = cols; i > 0 || j > 0;) {
      path.push_back({static_cast<int32_t>(i - 1), static_cast<int32_t>(j - 1)});
      const int8_t t = trace[at(i, j)];
      if (t == 0)
        --i, --j;
      else if (t == 1)
        --i;
      else
        --j;
    }
    const int64_t len = static_cast<int64_t>(path.size());
    DW_ALLOC(y, ctx.output(0, DType::kInt32, Shape{2, len}));
    int32_t* out = y->data<int32_t>();
    for (int64_t k = 0; k < len; ++k) {
      out[k] = path[len - 1 - k].first;
      out[len + k] = path[len - 1 - k].second;
    }
    return Status();
  }
};

// NGramRepeatBlock: in decoding, bans every token that would complete an n-gram the sequence
// already holds. For each batch row, wherever the ngram_size - 1 tokens before a position equal
// the row's last ngram_size - 1 tokens, the token at that position gets score -inf.
class NGramRepeatBlock : public Kernel {
 public:
  explicit NGramRepeatBlock(const KernelInit& init) : n_(init.attrs.getInt("ngram_size", 0)) {
    if (n_ < 1) fail("ngram_size is " + std::to_string(n_) + "; it must be at least 1");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& ids = ctx.input(0);
    const Tensor& scores = ctx.input(1);
    if (ids.dtype() != DType::kInt64 || ids.rank() != 2)
      return Status::error("input_ids must be int64 [batch, sequence]");
    if (scores.dtype() != DType::kFloat || scores.rank() != 2 || scores.dim(0) != ids.dim(0))
      return Status::error("scores " + shapeToString(scores.shape()) +
                           " must be float [batch, vocabulary] with input_ids' batch " +
                           std::to_string(ids.dim(0)));
    const int64_t batch = ids.dim(0), len = ids.dim(1), vocab = scores.dim(1);
    DW_ALLOC(y, ctx.output(0, DType::kFloat, scores.shape()));
    std::copy_n(scores.data<float>(), scores.size(), y->data<float>());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t* row = ids.data<int64_t>() + b * len;
      for (int64_t i = 0; i + n_ <= len; ++i) {
        bool same = true;
        for (int64_t k = 0; k + 1 < n_ && same; ++k) same = row[i + k] == row[len - n_ + 1 + k];
        if (!same) continue;
        const int64_t token = row[i + n_ - 1];
        if (token < 0 || token >= vocab)
          return Status::error("input_ids[" + std::to_string(b) + ", " +
                               std::to_string(i + n_ - 1) + "] is " + std::to_string(token) +
                               ", outside the vocabulary of scores (" + std::to_string(vocab) +
                               ")");
        y->data<float>()[b * vocab + token] = -std::numeric_limits<float>::infinity();
      }
    }
    return Status();
  }

 private:
  int64_t n_;
};

}  // namespace

void addMicrosoftKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  const std::string ms = dw::kMicrosoftDomain;
  r.add(h, "Inverse", 1, kMaxOpset, &makeKernel<Inverse>, true, ms);
  r.add(h, "MurmurHash3", 1, kMaxOpset, &makeKernel<MurmurHash3>, false, ms);
  r.add(h, "DynamicTimeWarping", 1, kMaxOpset, &makeKernel<DynamicTimeWarping>, false, ms);
  r.add(h, "NGramRepeatBlock", 1, kMaxOpset, &makeKernel<NGramRepeatBlock>, false, ms);
}

}  // namespace dw::engine
