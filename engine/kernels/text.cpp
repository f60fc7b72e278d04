// Text ops: StringNormalizer (stopword removal and case change) and TfIdfVectorizer (n-gram
// counting with skips over int or string tokens).
#include <algorithm>
#include <map>
#include <set>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

class StringNormalizer : public Kernel {
 public:
  explicit StringNormalizer(const KernelInit& init)
      : action_(init.attrs.getString("case_change_action")),
        caseSensitive_(init.attrs.getInt("is_case_sensitive") != 0) {
    if (action_ != "NONE" && action_ != "LOWER" && action_ != "UPPER")
      fail("case_change_action '" + action_ + "' must be NONE, LOWER or UPPER");
    for (const auto& w : init.attrs.getStrings("stopwords"))
      stop_.insert(caseSensitive_ ? w : lower(w));
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kString) return Status::error("X must be a string tensor");
    if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1)))
      return Status::error("X must have shape [C] or [1, C], got " + shapeToString(x.shape()));
    std::vector<std::string> kept;
    for (const auto& s : x.strings()) {
      if (stop_.count(caseSensitive_ ? s : lower(s))) continue;
      kept.push_back(action_ == "LOWER" ? lower(s) : (action_ == "UPPER" ? upper(s) : s));
    }
    // Everything filtered out still leaves one empty string.
    if (kept.empty()) kept.push_back("");
    const int64_t n = static_cast<int64_t>(kept.size());
    Shape shape = x.rank() == 1 ? Shape{n} : Shape{1, n};
    ctx.setOutput(0, Value(Tensor::fromStrings(std::move(kept), shape)));
    return Status();
  }

 private:
  std::string action_;
  bool caseSensitive_;
  std::set<std::string> stop_;
};

class TfIdfVectorizer : public Kernel {
 public:
  explicit TfIdfVectorizer(const KernelInit& init) {
    const auto& a = init.attrs;
    minGram_ = a.getInt("min_gram_length", 1);
    maxGram_ = a.getInt("max_gram_length", 1);
    maxSkip_ = a.getInt("max_skip_count", 0);
    mode_ = a.getString("mode", "TF");
    if (mode_ != "TF" && mode_ != "IDF" && mode_ != "TFIDF")
      fail("mode '" + mode_ + "' must be TF, IDF or TFIDF");
    if (minGram_ < 1 || maxGram_ < minGram_ || maxSkip_ < 0)
      fail("need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
    const auto counts = a.getInts("ngram_counts");
    const auto indexes = a.getInts("ngram_indexes");
    weights_ = a.getFloats("weights");
    const auto ints = a.getInts("pool_int64s");
    const auto strs = a.getStrings("pool_strings");
    strings_ = !strs.empty();
    const int64_t poolSize =
        strings_ ? static_cast<int64_t>(strs.size()) : static_cast<int64_t>(ints.size());
    // ngram_counts[i] is where the (i+1)-grams start in the pool.
    int64_t gramIndex = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const int64_t n = static_cast<int64_t>(i) + 1;
      const int64_t start = counts[i];
      const int64_t end = i + 1 < counts.size() ? counts[i + 1] : poolSize;
      if (start < 0 || start > end || end > poolSize) {
        fail("ngram_counts must rise from 0 to at most the pool's " + std::to_string(poolSize) +
             " entries; entry " + std::to_string(i) + " is " + std::to_string(start));
        return;
      }
      for (int64_t p = start; p + n <= end; p += n, ++gramIndex) {
        if (gramIndex >= static_cast<int64_t>(indexes.size())) {
          fail("ngram_indexes has fewer entries than the pool has n-grams");
          return;
        }
        std::vector<std::string> key;
        for (int64_t k = 0; k < n; ++k)
          key.push_back(strings_ ? strs[p + k] : std::to_string(ints[p + k]));
        if (indexes[gramIndex] < 0 || indexes[gramIndex] > (int64_t(1) << 31)) {
          fail("ngram_indexes holds " + std::to_string(indexes[gramIndex]) +
               ", not an output column index");
          return;
        }
        pool_[key] = indexes[gramIndex];
        outSize_ = std::max(outSize_, indexes[gramIndex] + 1);
      }
    }
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 1 && x.rank() != 2) return Status::error("X must be 1-D or 2-D");
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
    const int64_t C = x.rank() == 2 ? x.dim(1) : (x.rank() == 1 ? x.dim(0) : 0);
    DW_ALLOC(y,
             ctx.output(0, DType::kFloat, x.rank() == 2 ? Shape{rows, outSize_} : Shape{outSize_}));
    std::fill_n(y->data<float>(), y->size(), 0.0f);
    auto token = [&](int64_t i) {
      return x.dtype() == DType::kString ? x.strings()[i] : std::to_string(x.getInt(i));
    };
    for (int64_t r = 0; r < rows; ++r) {
      float* out = y->data<float>() + r * outSize_;
      std::vector<std::string> toks(C);
      for (int64_t c = 0; c < C; ++c) toks[c] = token(r * C + c);
      for (int64_t n = minGram_; n <= maxGram_; ++n) {
        // Unigrams have no gaps to skip.
        const int64_t skips = n == 1 ? 0 : maxSkip_;
        for (int64_t s = 0; s <= skips; ++s) {
          const int64_t step = s + 1;
          for (int64_t start = 0; start + (n - 1) * step < C; ++start) {
            std::vector<std::string> key;
            for (int64_t k = 0; k < n; ++k) key.push_back(toks[start + k * step]);
            auto it = pool_.find(key);
            if (it != pool_.end()) out[it->second] += 1;
          }
        }
      }
      for (int64_t i = 0; i < outSize_; ++i) {
        const float w = weights_.empty() ? 1.0f : weights_[i];
        if (mode_ == "IDF")
          out[i] = out[i] > 0 ? w : 0.0f;
        else if (mode_ == "TFIDF")
          out[i] *= w;
      }
    }
    return Status();
  }

 private:
  int64_t minGram_ = 1, maxGram_ = 1, maxSkip_ = 0, outSize_ = 0;
  std::string mode_;
  bool strings_ = false;
  std::vector<float> weights_;
  std::map<std::vector<std::string>, int64_t> pool_;
};

}  // namespace

void addTextKernels(KernelRegistry& r) {
  r.add(kReferenceTable, "StringNormalizer", 10, kMaxOpset, &makeKernel<StringNormalizer>, false);
  r.add(kReferenceTable, "TfIdfVectorizer", 9, kMaxOpset, &makeKernel<TfIdfVectorizer>, false);
}

}  // namespace dw::engine
