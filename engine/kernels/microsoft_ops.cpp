// com.microsoft operators that no composition of ai.onnx operators expresses, so they have
// kernels of their own (the rest are function bodies, nodes/microsoft_domain.cpp): Inverse,
// MurmurHash3, DynamicTimeWarping, NGramRepeatBlock, BifurcationDetector and Tokenizer. Each
// follows ONNX Runtime's contrib definition; tests/golden/ort-contrib holds ONNX Runtime 1.30's
// outputs for them. Also GroupQueryAttention, the attention of decoder LLM exports, which needs its
// key/value cache, CropAndResize, MaxpoolWithMask and WordConvEmbedding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>

#include <re2/re2.h>
#include <oneapi/dnnl/dnnl.hpp>

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
// of each cell on the path. Ties break as ONNX Runtime's do: a diagonal step only when strictly
// cheapest, then a step down only when strictly cheapest, else a step right.
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

// BifurcationDetector: a step of aggressive (speculative) decoding. pred_tokens guessed the
// continuation of src_tokens from prev_suffix_match_idx; they are accepted up to the first one
// that differs from the source (that one included, or the last if none differs) and appended to
// cur_tokens. Then the last n tokens, for n from min_ngram_size up, are looked up in src_tokens:
// while they occur there exactly once, suffix_match_idx is the index just after that occurrence
// (where the next guess starts). The search follows ONNX Runtime's: it stops at the first n
// that does not occur, or whose occurrence ends the source (keeping that index); an n that
// occurs more than once gives -1 and the search goes on with n + 1.
class BifurcationDetector : public Kernel {
 public:
  explicit BifurcationDetector(const KernelInit& init)
      : minN_(init.attrs.getInt("min_ngram_size", 1)),
        maxN_(init.attrs.getInt("max_ngram_size", 3)) {
    if (minN_ < 1 || maxN_ < minN_)
      fail("min_ngram_size " + std::to_string(minN_) + " and max_ngram_size " +
           std::to_string(maxN_) + " must satisfy 1 <= min_ngram_size <= max_ngram_size");
  }

  Status compute(KernelContext& ctx) override {
    for (int i : {0, 1, 3})
      if ((i < 3 || ctx.hasInput(i)) &&
          (ctx.input(i).dtype() != DType::kInt64 || ctx.input(i).rank() != 1))
        return Status::error(std::string(i == 0   ? "src_tokens"
                                         : i == 1 ? "cur_tokens"
                                                  : "pred_tokens") +
                             " must be a 1-D int64 tensor, not " +
                             shapeToString(ctx.input(i).shape()));
    const Tensor& prev = ctx.input(2);
    if (prev.dtype() != DType::kInt64 || prev.size() != 1)
      return Status::error("prev_suffix_match_idx must be one int64 value");
    const int64_t* src = ctx.input(0).data<int64_t>();
    const int64_t srcLen = ctx.input(0).size();
    const int64_t* cur = ctx.input(1).data<int64_t>();
    const int64_t curLen = ctx.input(1).size();
    std::vector<int64_t> tokens(cur, cur + curLen);
    if (ctx.hasInput(3)) {
      const int64_t from = prev.getInt(0);
      const Tensor& pred = ctx.input(3);
      if (from < 0 || from > srcLen)
        return Status::error("prev_suffix_match_idx is " + std::to_string(from) +
                             "; it must lie in [0, " + std::to_string(srcLen) +
                             "], the length of src_tokens");
      if (pred.size() != srcLen + 1 - from)
        return Status::error("pred_tokens has " + std::to_string(pred.size()) +
                             " tokens; it must have the source's remaining " +
                             std::to_string(srcLen - from) + " plus one");
      const int64_t* p = pred.data<int64_t>();
      int64_t keep = 0;
      while (keep < srcLen - from && p[keep] == src[from + keep]) ++keep;
      tokens.insert(tokens.end(), p, p + keep + 1);
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    int64_t match = -1;
    for (int64_t g = minN_; g <= maxN_ && g <= n; ++g) {
      const int64_t* suffix = tokens.data() + n - g;
      const auto* found = std::search(src, src + srcLen, suffix, suffix + g);
      if (found == src + srcLen) break;
      match = found - src + g;
      if (match >= srcLen) break;
      if (std::search(found + 1, src + srcLen, suffix, suffix + g) != src + srcLen) match = -1;
    }
    DW_ALLOC(y, ctx.output(0, DType::kInt64, Shape{n}));
    std::copy(tokens.begin(), tokens.end(), y->data<int64_t>());
    DW_ALLOC(idx, ctx.output(1, DType::kInt64, prev.shape()));
    idx->data<int64_t>()[0] = match;
    return Status();
  }

 private:
  int64_t minN_, maxN_;
};

// Tokenizer: splits each string of X ([C] or [N, C]) into tokens, as ONNX Runtime does, by
// separators (RE2 expressions, leftmost-longest; each splits the pieces the previous left) or
// by tokenexp (the matches are the tokens); a single empty separator, or tokenexp ".", gives
// each UTF-8 character. Tokens shorter than mincharnum characters are dropped. Y adds an axis of
// the most tokens any string has (plus two with mark: "\x02" before and "\x03" after each
// string's tokens), the rest filled with pad_value; no token anywhere gives that axis 0.
class Tokenizer : public Kernel {
 public:
  explicit Tokenizer(const KernelInit& init)
      : mark_(init.attrs.getInt("mark", 0) != 0),
        pad_(init.attrs.getString("pad_value")),
        minChars_(init.attrs.getInt("mincharnum", 0)) {
    for (const char* required : {"mark", "pad_value", "mincharnum"})
      if (!init.attrs.has(required)) {
        fail(std::string("Tokenizer needs the ") + required + " attribute");
        return;
      }
    if (minChars_ < 1) {
      fail("mincharnum is " + std::to_string(minChars_) + "; it must be 1 or more");
      return;
    }
    RE2::Options options;
    options.set_longest_match(true);
    options.set_log_errors(false);
    if (init.attrs.has("separators")) {
      const auto seps = init.attrs.getStrings("separators");
      if (seps.empty()) {
        fail("separators is empty; give at least one, or tokenexp instead");
        return;
      }
      chars_ = seps.size() == 1 && seps[0].empty();
      if (!chars_)
        for (const auto& sep : seps) {
          separators_.push_back(std::make_unique<RE2>(sep, options));
          if (!separators_.back()->ok()) {
            fail("separator '" + sep +
                 "' is not a valid RE2 expression: " + separators_.back()->error());
            return;
          }
        }
    } else {
      const std::string exp = init.attrs.has("tokenexp") ? init.attrs.getString("tokenexp") : "";
      if (exp.empty()) {
        fail("Tokenizer needs separators or a non-empty tokenexp");
        return;
      }
      chars_ = exp == ".";
      if (!chars_) {
        tokens_ = std::make_unique<RE2>(exp, options);
        if (!tokens_->ok()) {
          fail("tokenexp '" + exp + "' is not a valid RE2 expression: " + tokens_->error());
          return;
        }
      }
    }
    if (chars_ && minChars_ > 1)
      fail("mincharnum is " + std::to_string(minChars_) +
           "; splitting into characters gives tokens of 1");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kString || (x.rank() != 1 && x.rank() != 2))
      return Status::error("X must be a string tensor of [C] or [N, C], not " +
                           shapeToString(x.shape()));
    Shape out = x.shape();
    if (x.size() == 0) {
      // As ONNX Runtime shapes it: [N, 0] for [N, C] with nothing in it, [0] for [0].
      out.resize(x.rank() - 1);
      out.push_back(0);
      return ctx.output(0, DType::kString, out) ? Status() : ctx.status();
    }
    std::vector<std::vector<std::string_view>> rows(x.size());
    size_t most = 0;
    for (int64_t i = 0; i < x.size(); ++i) {
      const std::string& s = x.strings()[i];
      if (!validUtf8(s)) return Status::error("X[" + std::to_string(i) + "] is not valid UTF-8");
      split(s, rows[i]);
      most = std::max(most, rows[i].size());
    }
    const size_t width = most == 0 ? 0 : most + (mark_ ? 2 : 0);
    out.push_back(static_cast<int64_t>(width));
    DW_ALLOC(y, ctx.output(0, DType::kString, out));
    if (width == 0) return Status();
    auto& ys = y->strings();
    size_t at = 0;
    for (const auto& row : rows) {
      if (mark_) ys[at++] = "\x02";
      for (const auto& t : row) ys[at++] = std::string(t);
      if (mark_) ys[at++] = "\x03";
      for (size_t p = row.size() + (mark_ ? 2 : 0); p < width; ++p) ys[at++] = pad_;
    }
    return Status();
  }

 private:
  static size_t charLength(unsigned char lead) {
    return lead < 0x80           ? 1
           : (lead >> 5) == 0x6  ? 2
           : (lead >> 4) == 0xE  ? 3
           : (lead >> 3) == 0x1E ? 4
                                 : 0;
  }
  // Well-formed UTF-8 (Unicode's table 3-7): no overlong forms, surrogates or code points
  // past U+10FFFF, which ONNX Runtime refuses too.
  static bool validUtf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
      const unsigned char lead = byte(0);
      const size_t n = charLength(lead);
      if (n == 0 || lead == 0xC0 || lead == 0xC1 || lead > 0xF4 || i + n > s.size()) return false;
      for (size_t k = 1; k < n; ++k)
        if ((byte(k) & 0xC0) != 0x80) return false;
      if (n >= 3) {
        const unsigned char second = byte(1);
        if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||
            (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F))
          return false;
      }
      i += n;
    }
    return true;
  }
  static size_t chars(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  // The next position after the character at `at` (a match of nothing moves on by one).
  static size_t nextChar(std::string_view s, size_t at) {
    return at + std::max<size_t>(1, charLength(static_cast<unsigned char>(s[at])));
  }

  void split(std::string_view s, std::vector<std::string_view>& row) const {
    if (chars_) {
      for (size_t i = 0; i < s.size(); i = nextChar(s, i))
        row.push_back(s.substr(i, nextChar(s, i) - i));
      return;
    }
    if (tokens_) {
      if (chars(s) < static_cast<size_t>(minChars_)) return;
      re2::StringPiece text(s.data(), s.size()), m;
      size_t pos = 0;
      while (pos <= s.size() && tokens_->Match(text, pos, s.size(), RE2::UNANCHORED, &m, 1)) {
        const size_t at = m.data() - s.data();
        const std::string_view token(m.data(), m.size());
        if (chars(token) >= static_cast<size_t>(minChars_)) {
          row.push_back(token);
          pos = at + m.size();
        } else {
          if (at >= s.size()) break;
          pos = nextChar(s, at);
        }
      }
      return;
    }
    // Separators in turn, each splitting every piece the previous one left.
    row.assign(1, s);
    for (const auto& sep : separators_) {
      std::vector<std::string_view> pieces;
      for (const std::string_view text : row) {
        const re2::StringPiece sp(text.data(), text.size());
        re2::StringPiece m;
        size_t pos = 0;
        while (true) {
          if (pos > text.size() || !sep->Match(sp, pos, text.size(), RE2::UNANCHORED, &m, 1)) {
            const std::string_view rest = text.substr(std::min(pos, text.size()));
            if (chars(rest) >= static_cast<size_t>(minChars_)) pieces.push_back(rest);
            break;
          }
          const size_t at = m.data() - text.data();
          const std::string_view token = text.substr(pos, at - pos);
          if (chars(token) >= static_cast<size_t>(minChars_)) pieces.push_back(token);
          // A separator that matches nothing passes over the character where it matched.
          pos = m.size() > 0 ? at + m.size() : (at < text.size() ? nextChar(text, at) : at + 1);
        }
      }
      row = std::move(pieces);
      if (row.empty()) break;
    }
  }

  bool mark_;
  std::string pad_;
  int64_t minChars_;
  bool chars_ = false;
  std::vector<std::unique_ptr<RE2>> separators_;
  std::unique_ptr<RE2> tokens_;
};

// GroupQueryAttention: causal attention of num_heads query heads over kv_num_heads key/value
// heads (query head n reads kv head n / (num_heads / kv_num_heads)), with a key/value cache, as
// decoder LLM exports (onnxruntime-genai's) use it. Query, key and value come apart ([B, S,
// heads * size]) or packed in the query. past_key/past_value ([B, kv heads, P, size]) hold the
// earlier tokens; seqlens_k[b] + 1 is row b's total length and total_sequence_length the
// longest. The new keys and values follow row b's past (total - S tokens, none for a first
// prompt, S = total_sequence_length) in present_key/present_value ([B, kv heads, max(P, total),
// size]). With do_rotary, query and key heads rotate first (cos_cache, sin_cache: [positions,
// rotary size / 2]; positions from position_ids, else consecutive from the past's length).
// Scores are scale (default 1/sqrt(size)) * q.k, capped by softcap * tanh(x / softcap) where
// softcap > 0, plus attention_bias; a query attends to the keys up to its own position, the last
// local_window_size of them (its own included) where that is set; head_sink (or smooth_softmax: 0)
// is an extra logit per head in the softmax's denominator. The quantized caches (k_quant_type,
// v_quant_type), q/k normalization weights and output_qk are refused.
class GroupQueryAttention : public Kernel {
 public:
  explicit GroupQueryAttention(const KernelInit& init)
      : sparse_(init.opType == "SparseAttention"),
        blockSize_(init.attrs.getInt("sparse_block_size", 0)),
        heads_(init.attrs.getInt("num_heads", 0)),
        kvHeads_(init.attrs.getInt("kv_num_heads", 0)),
        scale_(init.attrs.getFloat("scale", 0.0f)),
        softcap_(init.attrs.getFloat("softcap", 0.0f)),
        rotary_(init.attrs.getInt("do_rotary", 0) != 0),
        interleaved_(init.attrs.getInt("rotary_interleaved", 0) != 0),
        window_(init.attrs.getInt("local_window_size", -1)),
        smooth_(init.attrs.getInt("smooth_softmax", -1) == 1) {
    if (heads_ <= 0 || kvHeads_ <= 0 || heads_ % kvHeads_ != 0)
      fail("num_heads (" + std::to_string(heads_) + ") must be a positive multiple of " +
           "kv_num_heads (" + std::to_string(kvHeads_) + ")");
    if (init.attrs.getInt("causal", 1) != 1) fail("only causal attention (causal = 1) is taken");
    for (const char* q : {"k_quant_type", "v_quant_type"})
      if (init.attrs.getString(q, "NONE") != "NONE")
        fail(std::string(q) + " '" + init.attrs.getString(q, "NONE") +
             "': quantized key/value caches are not taken");
    if (init.attrs.getInt("qk_output", 0) != 0) fail("qk_output (the scores) is not produced");
    if (sparse_ && blockSize_ <= 0) fail("sparse_block_size must be positive");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& q = ctx.input(0);
    if (q.dtype() != DType::kFloat || q.rank() != 3)
      return Status::error("query " + shapeToString(q.shape()) + " must be float [B, S, hidden]");
    // SparseAttention's inputs after the caches: the block layout, then GroupQueryAttention's
    // lengths (its key_total_sequence_lengths count the tokens, seqlens_k one fewer) and rotary
    // tables.
    const size_t inLens = sparse_ ? 8 : 5, inTotal = sparse_ ? 7 : 6, inCos = sparse_ ? 9 : 7,
                 inSin = sparse_ ? 10 : 8;
    for (int i : {12, 13, 14, 15})
      if (!sparse_ && ctx.hasInput(i))
        return Status::error("input " + std::to_string(i) +
                             " (k_scale, v_scale, q_norm_weight, k_norm_weight) is not taken");
    const int64_t B = q.dim(0), S = q.dim(1);
    const bool packed = !ctx.hasInput(1);
    const int64_t N = heads_, KV = kvHeads_;
    const int64_t H = packed ? q.dim(2) / (N + 2 * KV) : q.dim(2) / N;
    if (H == 0 || (packed ? H * (N + 2 * KV) : H * N) != q.dim(2))
      return Status::error("query's last axis (" + std::to_string(q.dim(2)) + ") is not " +
                           (packed ? "(num_heads + 2 * kv_num_heads)" : "num_heads") +
                           " times a head size");
    const float* qv = q.data<float>();
    const float *kv = nullptr, *vv = nullptr;
    if (!packed) {
      if (!ctx.hasInput(2)) return Status::error("key is given without value");
      for (int i : {1, 2}) {
        const Tensor& t = ctx.input(i);
        if (t.dtype() != DType::kFloat || t.shape() != Shape{B, S, KV * H})
          return Status::error(std::string(i == 1 ? "key " : "value ") + shapeToString(t.shape()) +
                               " must be float [" + std::to_string(B) + ", " + std::to_string(S) +
                               ", " + std::to_string(KV * H) + "] (kv_num_heads * head size)");
      }
      kv = ctx.input(1).data<float>();
      vv = ctx.input(2).data<float>();
    }
    // Row strides and where each part starts in a token's row.
    const int64_t qRow = q.dim(2), kRow = packed ? qRow : KV * H;
    const int64_t kOff = packed ? N * H : 0, vOff = packed ? (N + KV) * H : 0;
    if (packed) kv = vv = qv;
    int64_t P = 0;
    const float *pk = nullptr, *pv = nullptr;
    if (ctx.hasInput(3) != ctx.hasInput(4))
      return Status::error("past_key and past_value come together");
    if (ctx.hasInput(3)) {
      const Tensor& a = ctx.input(3);
      const Tensor& b = ctx.input(4);
      if (a.rank() != 4 || a.dim(0) != B || a.dim(1) != KV || a.dim(3) != H ||
          a.shape() != b.shape() || a.dtype() != DType::kFloat || b.dtype() != DType::kFloat)
        return Status::error("past_key " + shapeToString(a.shape()) + " and past_value " +
                             shapeToString(b.shape()) + " must be float [" + std::to_string(B) +
                             ", " + std::to_string(KV) + ", past, " + std::to_string(H) + "]");
      P = a.dim(2);
      pk = a.data<float>();
      pv = b.data<float>();
    }
    const Tensor& lens = ctx.input(inLens);
    const Tensor& totalT = ctx.input(inTotal);
    const char* lensName = sparse_ ? "key_total_sequence_lengths" : "seqlens_k";
    if (lens.dtype() != DType::kInt32 || lens.size() != B)
      return Status::error(std::string(lensName) + " must be int32 [" + std::to_string(B) + "]");
    if (totalT.dtype() != DType::kInt32 || totalT.size() != 1)
      return Status::error("total_sequence_length must be one int32");
    const int64_t total = totalT.data<int32_t>()[0];
    // A longer total than the past and the new tokens hold would only size the present caches
    // (2^31 of them took 8 GB) with nothing to put there.
    if (total < 1 || total > P + S)
      return Status::error("total_sequence_length is " + std::to_string(total) +
                           "; it must be between 1 and the past's " + std::to_string(P) +
                           " plus the " + std::to_string(S) + " new tokens");
    const bool prompt = S == total;
    const int64_t present = std::max(P, total);
    std::vector<int64_t> past(B);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = int64_t(lens.data<int32_t>()[b]) + (sparse_ ? 0 : 1);
      past[b] = prompt ? 0 : len - S;
      if (len < 1 || len > total || past[b] < 0 || past[b] > P)
        return Status::error(std::string(lensName) + "[" + std::to_string(b) + "] is " +
                             std::to_string(lens.data<int32_t>()[b]) + ": row " +
                             std::to_string(b) + " would hold " + std::to_string(len) +
                             " tokens, with " + std::to_string(S) + " new, " + std::to_string(P) +
                             " in the past and total_sequence_length " + std::to_string(total));
    }
    // Rotary tables.
    const float *cosT = nullptr, *sinT = nullptr;
    int64_t half = 0, maxPos = 0;
    const int64_t* pos = nullptr;
    if (rotary_) {
      if (!ctx.hasInput(inCos) || !ctx.hasInput(inSin))
        return Status::error("do_rotary needs cos_cache and sin_cache");
      const Tensor& c = ctx.input(inCos);
      const Tensor& s = ctx.input(inSin);
      if (c.rank() != 2 || c.shape() != s.shape() || c.dtype() != DType::kFloat ||
          s.dtype() != DType::kFloat || 2 * c.dim(1) > H)
        return Status::error("cos_cache " + shapeToString(c.shape()) + " and sin_cache " +
                             shapeToString(s.shape()) +
                             " must be float [positions, rotary size / 2] with a rotary size of "
                             "at most the head size " +
                             std::to_string(H));
      half = c.dim(1);
      maxPos = c.dim(0);
      cosT = c.data<float>();
      sinT = s.data<float>();
      if (!sparse_ && ctx.hasInput(9)) {
        const Tensor& p = ctx.input(9);
        if (p.dtype() != DType::kInt64 || p.size() != B * S)
          return Status::error("position_ids must be int64 [" + std::to_string(B) + ", " +
                               std::to_string(S) + "]");
        pos = p.data<int64_t>();
      }
    }
    const float* bias = nullptr;
    Shape biasShape;
    if (!sparse_ && ctx.hasInput(10)) {
      const Tensor& t = ctx.input(10);
      biasShape = t.shape();
      if (t.dtype() != DType::kFloat || t.rank() != 4 || (t.dim(0) != 1 && t.dim(0) != B) ||
          (t.dim(1) != 1 && t.dim(1) != N) || t.dim(2) != S || t.dim(3) < total)
        return Status::error("attention_bias " + shapeToString(t.shape()) + " must be float [" +
                             std::to_string(B) + " or 1, " + std::to_string(N) + " or 1, " +
                             std::to_string(S) + ", " + std::to_string(total) + "]");
      bias = t.data<float>();
    }
    const float* sink = nullptr;
    if (!sparse_ && ctx.hasInput(11)) {
      const Tensor& t = ctx.input(11);
      if (t.dtype() != DType::kFloat || t.size() != N)
        return Status::error("head_sink must be float [" + std::to_string(N) + "]");
      sink = t.data<float>();
    }

    // SparseAttention's block layouts, head n following layout n % layouts: per row of blocks
    // of queries, the blocks of keys it may read (compressed rows). A row listing as many
    // blocks as a causal row has is dense.
    const int32_t *rowIdx = nullptr, *colIdx = nullptr;
    int64_t layouts = 0, rowStride = 0, colStride = 0;
    if (sparse_) {
      const Tensor &r = ctx.input(5), &c = ctx.input(6);
      if (r.dtype() != DType::kInt32 || c.dtype() != DType::kInt32 || r.rank() != 2 ||
          c.rank() != 2 || r.dim(0) != c.dim(0) || r.dim(0) < 1 || N % r.dim(0) != 0 ||
          r.dim(1) < 2)
        return Status::error("block_row_indices " + shapeToString(r.shape()) +
                             " and block_col_indices " + shapeToString(c.shape()) +
                             " must be int32 [layouts, blocks + 1] and [layouts, nonzero blocks] "
                             "with num_heads a multiple of the layouts");
      layouts = r.dim(0);
      rowStride = r.dim(1);
      colStride = c.dim(1);
      rowIdx = r.data<int32_t>();
      colIdx = c.data<int32_t>();
      if ((P > 0 ? P : total) > (rowStride - 1) * blockSize_)
        return Status::error(
            "the block layout covers " + std::to_string((rowStride - 1) * blockSize_) +
            " positions, fewer than the cache's " + std::to_string(P > 0 ? P : total));
      for (int64_t l = 0; l < layouts; ++l) {
        const int32_t* rr = rowIdx + l * rowStride;
        for (int64_t k = 0; k + 1 < rowStride; ++k)
          if (rr[k] < 0 || rr[k + 1] < rr[k] || rr[k + 1] > colStride)
            return Status::error("block_row_indices of layout " + std::to_string(l) +
                                 " do not rise within block_col_indices' " +
                                 std::to_string(colStride) + " entries");
      }
    }
    std::vector<char> allowed;

    DW_ALLOC(out, ctx.output(0, DType::kFloat, Shape{B, S, N * H}));
    // The caches: the present outputs (scratch where the node has none).
    const Shape presentShape{B, KV, present, H};
    auto cache = [&](size_t i) -> float* {
      Tensor* t = i < ctx.numOutputs() ? ctx.output(i, DType::kFloat, presentShape)
                                       : ctx.scratch(DType::kFloat, presentShape);
      return t ? t->data<float>() : nullptr;
    };
    float* pkOut = cache(1);
    float* pvOut = cache(2);
    if (!pkOut || !pvOut) return ctx.status();
    std::fill_n(pkOut, B * KV * present * H, 0.0f);
    std::fill_n(pvOut, B * KV * present * H, 0.0f);
    // Rotates one head's vector at position p in place.
    auto rotate = [&](float* x, int64_t p) -> Status {
      if (p < 0 || p >= maxPos)
        return Status::error("position " + std::to_string(p) + " is outside cos_cache's " +
                             std::to_string(maxPos) + " positions");
      const float* c = cosT + p * half;
      const float* s = sinT + p * half;
      for (int64_t k = 0; k < half; ++k) {
        const int64_t i0 = interleaved_ ? 2 * k : k, i1 = interleaved_ ? 2 * k + 1 : k + half;
        const float a = x[i0], b = x[i1];
        x[i0] = a * c[k] - b * s[k];
        x[i1] = a * s[k] + b * c[k];
      }
      return Status();
    };
    // The new keys and values into the caches after each row's past, rotated; queries rotated.
    std::vector<float> qr(B * S * N * H);
    for (int64_t b = 0; b < B; ++b) {
      // SparseAttention's caches are one buffer with the past: positions past the row's tokens
      // keep what they held.
      const int64_t kept = sparse_ ? std::min(P, present) : past[b];
      for (int64_t h = 0; h < KV; ++h)
        for (int64_t t = 0; t < kept; ++t) {
          std::copy_n(pk + ((b * KV + h) * P + t) * H, H, pkOut + ((b * KV + h) * present + t) * H);
          std::copy_n(pv + ((b * KV + h) * P + t) * H, H, pvOut + ((b * KV + h) * present + t) * H);
        }
      for (int64_t i = 0; i < S; ++i) {
        const int64_t p = pos ? pos[b * S + i] : past[b] + i;
        const float* row = qv + (b * S + i) * qRow;
        for (int64_t n = 0; n < N; ++n) {
          float* dst = qr.data() + ((b * S + i) * N + n) * H;
          std::copy_n(row + n * H, H, dst);
          if (rotary_) DW_RETURN_IF_ERROR(rotate(dst, p));
        }
        const int64_t at = past[b] + i;
        if (at >= present) continue;
        for (int64_t h = 0; h < KV; ++h) {
          float* kd = pkOut + ((b * KV + h) * present + at) * H;
          std::copy_n(kv + (b * S + i) * kRow + kOff + h * H, H, kd);
          if (rotary_) DW_RETURN_IF_ERROR(rotate(kd, p));
          std::copy_n(vv + (b * S + i) * kRow + vOff + h * H, H,
                      pvOut + ((b * KV + h) * present + at) * H);
        }
      }
    }
    const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(H));
    const int64_t group = N / KV;
    std::vector<float> logits(present);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < N; ++n) {
        const float* keys = pkOut + (b * KV + n / group) * present * H;
        const float* values = pvOut + (b * KV + n / group) * present * H;
        for (int64_t i = 0; i < S; ++i) {
          const float* qi = qr.data() + ((b * S + i) * N + n) * H;
          float* o = out->data<float>() + ((b * S + i) * N + n) * H;
          const int64_t end = std::min(past[b] + i + 1, present);
          // The window counts the query's own token (ONNX Runtime 1.30's CPU kernel).
          const int64_t start = window_ > 0 && end > window_ ? end - window_ : int64_t{0};
          const float* biasRow = bias ? bias + (((biasShape[0] == 1 ? 0 : b) * biasShape[1] +
                                                 (biasShape[1] == 1 ? 0 : n)) *
                                                    S +
                                                i) *
                                                   biasShape[3]
                                      : nullptr;
          float top = sink ? sink[n] : smooth_ ? 0.0f : -std::numeric_limits<float>::infinity();
          bool masked = false;
          if (sparse_) {
            const int64_t row = (past[b] + i) / blockSize_;
            const int32_t* rr = rowIdx + (n % layouts) * rowStride;
            masked = rr[row + 1] - rr[row] != row + 1;
            if (masked) {
              allowed.assign(static_cast<size_t>(end), 0);
              for (int32_t k = rr[row]; k < rr[row + 1]; ++k) {
                const int64_t col = colIdx[(n % layouts) * colStride + k];
                for (int64_t j = col * blockSize_; j < std::min(end, (col + 1) * blockSize_); ++j)
                  if (j >= 0) allowed[j] = 1;
              }
            }
          }
          for (int64_t j = start; j < end; ++j) {
            float d = 0;
            for (int64_t k = 0; k < H; ++k) d += qi[k] * keys[j * H + k];
            d *= scale;
            if (softcap_ > 0) d = softcap_ * std::tanh(d / softcap_);
            if (biasRow) d += biasRow[j];
            if (masked && !allowed[j]) d = std::numeric_limits<float>::lowest();
            logits[j] = d;
            top = std::max(top, d);
          }
          double sum = sink      ? std::exp(double(sink[n]) - top)
                       : smooth_ ? std::exp(-double(top))
                                 : 0;
          for (int64_t j = start; j < end; ++j) sum += std::exp(double(logits[j]) - top);
          std::fill_n(o, H, 0.0f);
          for (int64_t j = start; j < end; ++j) {
            const float w = static_cast<float>(std::exp(double(logits[j]) - top) / sum);
            for (int64_t k = 0; k < H; ++k) o[k] += w * values[j * H + k];
          }
        }
      }
    return Status();
  }

 private:
  bool sparse_;  // SparseAttention: GroupQueryAttention over a block layout
  int64_t blockSize_;
  int64_t heads_, kvHeads_;
  float scale_, softcap_;
  bool rotary_, interleaved_;
  int64_t window_;
  bool smooth_;
};

// CropAndResize (TensorFlow's crop_and_resize): each region of rois ([R, 4]: y1, x1, y2, x2 in
// [0, 1] of the image's extent) of image batch_indices[r] of X ([N, C, H, W]), sampled on a
// crop_size grid ([2]: height, width) whose corners are the region's; bilinear or the nearest
// pixel; samples outside the image take extrapolation_value.
class CropAndResize : public Kernel {
 public:
  explicit CropAndResize(const KernelInit& init)
      : nearest_(init.attrs.getString("mode", "bilinear") == "nearest"),
        extrapolation_(init.attrs.getFloat("extrapolation_value", 0.0f)) {
    const std::string mode = init.attrs.getString("mode", "bilinear");
    if (mode != "bilinear" && mode != "nearest")
      fail("mode '" + mode + "' must be bilinear or nearest");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& rois = ctx.input(1);
    const Tensor& index = ctx.input(2);
    const Tensor& size = ctx.input(3);
    if (x.rank() != 4)
      return Status::error("X " + shapeToString(x.shape()) + " must be [N, C, H, W]");
    if (rois.rank() != 2 || rois.dim(1) != 4 || rois.dtype() != x.dtype())
      return Status::error("rois " + shapeToString(rois.shape()) +
                           " must be [regions, 4] (y1, x1, y2, x2) of X's type");
    const int64_t R = rois.dim(0);
    if (index.dtype() != DType::kInt32 || index.size() != R)
      return Status::error("batch_indices must be int32 [" + std::to_string(R) + "]");
    if (size.dtype() != DType::kInt32 || size.size() != 2)
      return Status::error("crop_size must be int32 [2] (height, width)");
    const int64_t ch = size.data<int32_t>()[0], cw = size.data<int32_t>()[1];
    if (ch <= 0 || cw <= 0 || ch * cw > (int64_t{1} << 31))
      return Status::error("crop_size (" + std::to_string(ch) + ", " + std::to_string(cw) +
                           ") must be positive, and at most 2^31 values a crop");
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    for (int64_t r = 0; r < R; ++r)
      if (index.data<int32_t>()[r] < 0 || index.data<int32_t>()[r] >= N)
        return Status::error("batch_indices[" + std::to_string(r) + "] is " +
                             std::to_string(index.data<int32_t>()[r]) + "; X has " +
                             std::to_string(N) + " image(s)");
    DW_ALLOC(y, ctx.output(0, x.dtype(), Shape{R, C, ch, cw}));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* box = rois.data<T>();
      T* out = y->data<T>();
      for (int64_t r = 0; r < R; ++r) {
        const double y1 = box[4 * r], x1 = box[4 * r + 1], y2 = box[4 * r + 2], x2 = box[4 * r + 3];
        const T* img = x.data<T>() + index.data<int32_t>()[r] * C * H * W;
        const double hs = ch > 1 ? (y2 - y1) * (H - 1) / double(ch - 1) : 0,
                     ws = cw > 1 ? (x2 - x1) * (W - 1) / double(cw - 1) : 0;
        for (int64_t c = 0; c < C; ++c) {
          const T* plane = img + c * H * W;
          T* o = out + ((r * C + c) * ch) * cw;
          for (int64_t i = 0; i < ch; ++i) {
            const double iy = ch > 1 ? y1 * (H - 1) + i * hs : 0.5 * (y1 + y2) * (H - 1);
            for (int64_t j = 0; j < cw; ++j) {
              const double ix = cw > 1 ? x1 * (W - 1) + j * ws : 0.5 * (x1 + x2) * (W - 1);
              T& v = o[i * cw + j];
              // Written so that a NaN coordinate (a NaN in rois) is outside too.
              if (!(iy >= 0 && iy <= H - 1 && ix >= 0 && ix <= W - 1)) {
                v = static_cast<T>(extrapolation_);
                continue;
              }
              if (nearest_) {
                v = plane[int64_t(std::round(iy)) * W + int64_t(std::round(ix))];
                continue;
              }
              const int64_t t = int64_t(std::floor(iy)), b = int64_t(std::ceil(iy)),
                            l = int64_t(std::floor(ix)), rr = int64_t(std::ceil(ix));
              const double fy = iy - t, fx = ix - l;
              const double top = plane[t * W + l] +
                                 (plane[t * W + rr] - double(plane[t * W + l])) * fx,
                           bottom = plane[b * W + l] +
                                    (plane[b * W + rr] - double(plane[b * W + l])) * fx;
              v = static_cast<T>(top + (bottom - top) * fy);
            }
          }
        }
      }
      return Status();
    });
  }

 private:
  bool nearest_;
  float extrapolation_;
};

// MaxpoolWithMask: 2-D max pooling where the int32 mask M decides which elements count, with
// ONNX Runtime 1.30's loop exactly (its cases are the reference): scanning a window row by row,
// an element whose mask is 0 ends that row's scan, except the plane's first element, which
// always counts; an empty window gives the lowest float. Plane p of X reads M from element
// (p * H * W) % (M's planes) on, as ONNX Runtime does: M's first plane for all of X where M has
// one plane.
class MaxpoolWithMask : public Kernel {
 public:
  explicit MaxpoolWithMask(const KernelInit& init)
      : kernel_(init.attrs.getInts("kernel_shape")),
        strides_(init.attrs.getInts("strides")),
        pads_(init.attrs.getInts("pads")) {
    if (init.attrs.getString("auto_pad", "NOTSET") != "NOTSET")
      fail("auto_pad is not taken; give pads");
    if (kernel_.size() != 2) fail("kernel_shape must have 2 values (2-D pooling)");
    if (strides_.empty()) strides_ = {1, 1};
    if (pads_.empty()) pads_ = {0, 0, 0, 0};
    // Bounded, so that no size computed from them overflows.
    auto within = [](const std::vector<int64_t>& v, int64_t lo) {
      return std::all_of(v.begin(), v.end(),
                         [lo](int64_t x) { return x >= lo && x <= (int64_t{1} << 30); });
    };
    if (strides_.size() != 2 || pads_.size() != 4 || !within(strides_, 1) || !within(pads_, 0) ||
        !within(kernel_, 1))
      fail(
          "strides (2 values), pads (4) and kernel_shape (2) must be positive (pads at least 0) "
          "and at most 2^30");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& m = ctx.input(1);
    if (x.rank() != 4 || x.dtype() != DType::kFloat)
      return Status::error("X " + shapeToString(x.shape()) + " must be float [N, C, H, W]");
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    if (m.dtype() != DType::kInt32 || H * W == 0 || m.size() % (H * W) != 0 || m.size() == 0)
      return Status::error("M " + shapeToString(m.shape()) + " must be int32 planes of [" +
                           std::to_string(H) + ", " + std::to_string(W) + "]");
    const int64_t planes = m.size() / (H * W);
    const int64_t OH = (H + pads_[0] + pads_[2] - kernel_[0]) / strides_[0] + 1,
                  OW = (W + pads_[1] + pads_[3] - kernel_[1]) / strides_[1] + 1;
    if (OH < 1 || OW < 1)
      return Status::error("the window is larger than the padded image " +
                           shapeToString(x.shape()));
    DW_ALLOC(y, ctx.output(0, DType::kFloat, Shape{N, C, OH, OW}));
    for (int64_t p = 0; p < N * C; ++p) {
      const float* xp = x.data<float>() + p * H * W;
      // ONNX Runtime's offset into M, which its cases follow: (plane * H * W) modulo the
      // number of mask planes, in elements (an offset, not a plane, where M has several).
      const int32_t* mp = m.data<int32_t>() + (p * H * W) % planes;
      float* yp = y->data<float>() + p * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t h0 = std::max<int64_t>(oh * strides_[0] - pads_[0], 0),
                        h1 = std::min(oh * strides_[0] - pads_[0] + kernel_[0], H),
                        w0 = std::max<int64_t>(ow * strides_[1] - pads_[1], 0),
                        w1 = std::min(ow * strides_[1] - pads_[1] + kernel_[1], W);
          float best = std::numeric_limits<float>::lowest();
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const int64_t at = h * W + w;
              if (at > 0 && mp[at] == 0) break;
              best = std::max(best, xp[at]);
            }
          yp[oh * OW + ow] = best;
        }
    }
    return Status();
  }

 private:
  std::vector<int64_t> kernel_, strides_, pads_;
};

// WordConvEmbedding: a word embedding from the word's characters. Sequence ([words, chars],
// int32 character ids, 0 after the word's end) looks its characters up in C ([vocabulary, char
// size]); each filter of W ([filters, 1, window, char size]) with its bias B slides over the
// word's characters, tanh, and the largest value over the positions is the filter's output:
// Y is [words, filters].
class WordConvEmbedding : public Kernel {
 public:
  explicit WordConvEmbedding(const KernelInit&) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& seq = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor& bias = ctx.input(2);
    const Tensor& table = ctx.input(3);
    if (seq.dtype() != DType::kInt32 || seq.rank() < 1)
      return Status::error("Sequence must be int32 [words, characters]");
    for (const auto& [t, name] :
         {std::pair<const Tensor*, const char*>{&w, "W"}, {&bias, "B"}, {&table, "C"}})
      if (t->dtype() != DType::kFloat)
        return Status::error(std::string(name) + " is " + dtypeName(t->dtype()) +
                             "; WordConvEmbedding takes float32");
    if (w.rank() != 4 || w.dim(1) != 1 || table.rank() != 2 || w.dim(3) != table.dim(1))
      return Status::error("W " + shapeToString(w.shape()) + " must be [filters, 1, window, " +
                           "character size] and C " + shapeToString(table.shape()) +
                           " [vocabulary, character size]");
    const int64_t filters = w.dim(0), window = w.dim(2), E = w.dim(3), vocab = table.dim(0);
    if (bias.size() != filters)
      return Status::error("B must have one value per filter (" + std::to_string(filters) + ")");
    const int64_t chars = seq.dim(seq.rank() - 1), words = chars ? seq.size() / chars : 0;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, Shape{words, filters}));
    const int32_t* ids = seq.data<int32_t>();
    const float *wv = w.data<float>(), *bv = bias.data<float>(), *cv = table.data<float>();
    std::vector<float> emb(chars * E);
    for (int64_t n = 0; n < words; ++n) {
      int64_t len = 0;
      for (int64_t k = 0; k < chars; ++k) {
        const int32_t id = ids[n * chars + k];
        if (id < 0 || id >= vocab)
          return Status::error("Sequence[" + std::to_string(n) + ", " + std::to_string(k) +
                               "] is " + std::to_string(id) + ", outside C's " +
                               std::to_string(vocab) + " characters");
        if (id != 0) len = k + 1;
        std::copy_n(cv + int64_t(id) * E, E, emb.data() + k * E);
      }
      const int64_t positions = std::max<int64_t>(1, std::min(len, chars) - window + 1);
      for (int64_t f = 0; f < filters; ++f) {
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < positions && t + window <= chars; ++t) {
          double v = bv[f];
          for (int64_t k = 0; k < window; ++k)
            for (int64_t e = 0; e < E; ++e)
              v += double(wv[(f * window + k) * E + e]) * emb[(t + k) * E + e];
          best = std::max(best, static_cast<float>(std::tanh(v)));
        }
        y->data<float>()[n * filters + f] = best;
      }
    }
    return Status();
  }
};

// MatMulFpQ4: A [..., K] times B [K, N] stored in MLAS's 4-bit blocks (see the catalogue's
// description), dequantized into a float matrix on every run, then one sgemm.
class MatMulFpQ4 : public Kernel {
 public:
  // As ONNX Runtime reads the attribute: 0 is the symmetric layout, anything else the one with
  // zero points (MLAS's 64- and 128-value blocks are not reachable through this op).
  explicit MatMulFpQ4(const KernelInit& init)
      : zeroPoints_(init.attrs.getInt("blk_quant_type", 1) != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor& shape = ctx.input(2);
    if (a.dtype() != DType::kFloat || a.rank() < 1)
      return Status::error("A must be a float32 tensor of rank 1 or more");
    if (b.dtype() != DType::kUInt8) return Status::error("B must be uint8");
    if (shape.size() != 2) return Status::error("B_shape must hold [K, N]");
    const int64_t K = shape.getInt(0), N = shape.getInt(1);
    if (K < 1 || N < 1)
      return Status::error("B_shape [" + std::to_string(K) + ", " + std::to_string(N) +
                           "] must be positive");
    if (a.dim(a.rank() - 1) != K)
      return Status::error("A's last axis has " + std::to_string(a.dim(a.rank() - 1)) +
                           " values, but B_shape says K is " + std::to_string(K));
    const int64_t blkLen = 32;
    const int64_t head = zeroPoints_ ? 5 : 4;  // the scale, and the zero point
    const int64_t blob = head + blkLen / 2, blocks = (K + blkLen - 1) / blkLen;
    if (b.size() != N * blocks * blob)
      return Status::error("B holds " + std::to_string(b.size()) + " bytes; " + std::to_string(N) +
                           " columns of " + std::to_string(blocks) + " blocks of " +
                           std::to_string(blob) + " bytes need " +
                           std::to_string(N * blocks * blob));
    std::vector<float> w(static_cast<size_t>(K * N));
    const uint8_t* src = b.data<uint8_t>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t blk = 0; blk < blocks; ++blk, src += blob) {
        float scale;
        std::memcpy(&scale, src, sizeof scale);
        const int zero = zeroPoints_ ? src[4] : 8;
        const uint8_t* codes = src + head;
        const int64_t k0 = blk * blkLen, len = std::min(blkLen, K - k0);
        // Byte l holds value l (low nibble) and value l + 16 (high).
        for (int64_t l = 0; l < 16; ++l) {
          if (l < len) w[(k0 + l) * N + n] = static_cast<float>((codes[l] & 15) - zero) * scale;
          if (l + 16 < len)
            w[(k0 + l + 16) * N + n] = static_cast<float>((codes[l] >> 4) - zero) * scale;
        }
      }
    Shape out = a.shape();
    out.back() = N;
    DW_ALLOC(y, ctx.output(0, DType::kFloat, out));
    const int64_t M = a.size() / K;
    if (M > 0)
      dnnl::sgemm('N', 'N', M, N, K, 1.0f, a.data<float>(), K, w.data(), N, 0.0f, y->data<float>(),
                  N);
    return Status();
  }

 private:
  bool zeroPoints_;
};

// SparseToDenseMatMul: Y = alpha op(A) op(B) with A a sparse tensor, which deepwire holds dense
// (a sparse graph input or initializer); its zero entries are skipped. alpha scales floating
// products; integer ones wrap as C++ integers do and take alpha 1 only (ONNX Runtime ignores
// it there, and for double, which here it scales).
class SparseToDenseMatMul : public Kernel {
 public:
  explicit SparseToDenseMatMul(const KernelInit& init)
      : alpha_(init.attrs.getFloat("alpha", 1.0f)),
        transA_(init.attrs.getInt("transA", 0) != 0),
        transB_(init.attrs.getInt("transB", 0) != 0) {}
  Status compute(KernelContext& ctx) override {
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    if (a.rank() != 2 || b.rank() != 2 || a.dtype() != b.dtype())
      return Status::error("A and B must be 2-D of one type, got " +
                           std::string(dtypeName(a.dtype())) + " " + shapeToString(a.shape()) +
                           " and " + dtypeName(b.dtype()) + " " + shapeToString(b.shape()));
    const int64_t M = transA_ ? a.dim(1) : a.dim(0), K = transA_ ? a.dim(0) : a.dim(1);
    const int64_t Kb = transB_ ? b.dim(1) : b.dim(0), N = transB_ ? b.dim(0) : b.dim(1);
    if (K != Kb)
      return Status::error("op(A) is " + std::to_string(M) + " x " + std::to_string(K) +
                           " and op(B) " + std::to_string(Kb) + " x " + std::to_string(N) +
                           ": the inner sizes differ");
    DW_ALLOC(y, ctx.output(0, a.dtype(), {M, N}));
    auto run = [&](auto zero, double alpha) -> Status {
      using T = decltype(zero);
      const T *A = a.data<T>(), *Bv = b.data<T>();
      T* Y = y->data<T>();
      std::fill_n(Y, M * N, T(0));
      const T scale = static_cast<T>(alpha);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) {
          const T v = transA_ ? A[k * M + i] : A[i * K + k];
          if (v == T(0)) continue;
          const T av = std::is_floating_point_v<T> ? static_cast<T>(v * scale) : v;
          for (int64_t j = 0; j < N; ++j)
            Y[i * N + j] += av * (transB_ ? Bv[j * K + k] : Bv[k * N + j]);
        }
      return Status();
    };
    switch (a.dtype()) {
      case DType::kFloat:
        return run(float{}, alpha_);
      case DType::kDouble:
        return run(double{}, alpha_);
      default:
        if (alpha_ != 1.0f)
          return Status::error("alpha must be 1 for integer matrices (it is " +
                               std::to_string(alpha_) + ")");
        switch (a.dtype()) {
          case DType::kInt32:
            return run(int32_t{}, 1);
          case DType::kInt64:
            return run(int64_t{}, 1);
          case DType::kUInt32:
            return run(uint32_t{}, 1);
          case DType::kUInt64:
            return run(uint64_t{}, 1);
          default:
            return Status::error(std::string("no SparseToDenseMatMul for ") + dtypeName(a.dtype()));
        }
    }
  }

 private:
  float alpha_;
  bool transA_, transB_;
};

}  // namespace

void addMicrosoftKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  const std::string ms = dw::kMicrosoftDomain;
  r.add(h, "Inverse", 1, kMaxOpset, &makeKernel<Inverse>, true, ms);
  r.add(h, "SparseToDenseMatMul", 1, kMaxOpset, &makeKernel<SparseToDenseMatMul>, false, ms);
  r.add(h, "MurmurHash3", 1, kMaxOpset, &makeKernel<MurmurHash3>, false, ms);
  r.add(h, "DynamicTimeWarping", 1, kMaxOpset, &makeKernel<DynamicTimeWarping>, false, ms);
  r.add(h, "NGramRepeatBlock", 1, kMaxOpset, &makeKernel<NGramRepeatBlock>, false, ms);
  r.add(h, "BifurcationDetector", 1, kMaxOpset, &makeKernel<BifurcationDetector>, false, ms);
  r.add(h, "Tokenizer", 1, kMaxOpset, &makeKernel<Tokenizer>, false, ms);
  r.add(h, "GroupQueryAttention", 1, kMaxOpset, &makeKernel<GroupQueryAttention>, true, ms);
  r.add(h, "SparseAttention", 1, kMaxOpset, &makeKernel<GroupQueryAttention>, false, ms);
  r.add(h, "CropAndResize", 1, kMaxOpset, &makeKernel<CropAndResize>, true, ms);
  r.add(h, "MaxpoolWithMask", 1, kMaxOpset, &makeKernel<MaxpoolWithMask>, false, ms);
  r.add(h, "WordConvEmbedding", 1, kMaxOpset, &makeKernel<WordConvEmbedding>, false, ms);
  r.add(h, "MatMulFpQ4", 1, kMaxOpset, &makeKernel<MatMulFpQ4>, false, ms);
}

}  // namespace dw::engine
