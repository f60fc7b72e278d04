// Text generation loops of com.microsoft (ONNX Runtime's contrib domain): GreedySearch and
// Sampling run a GPT-2-style decoder subgraph once per new token, as ONNX Runtime defines the
// protocol. The decoder takes input_ids, position_ids, attention_mask and one past_i per layer
// ([2, batch, heads, past length, head size]: keys and values so far) and returns logits
// [batch, length, vocabulary] and present_i, which become the next call's past_i. The first call
// sees the whole prompt with empty pasts; every later call one token per row.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_set>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// The scores of the next token per row, [rows, vocab], changed in place by the options below
// in ONNX Runtime's order.
struct Scores {
  float* v;
  int64_t rows, vocab;
  float* row(int64_t r) { return v + r * vocab; }
};

constexpr float kLowest = std::numeric_limits<float>::lowest();

class GptGeneration : public Kernel {
 public:
  explicit GptGeneration(const KernelInit& init)
      : sampling_(init.opType == "Sampling"), maxSteps_(init.maxLoopIterations) {
    auto sub = [&](const char* name) {
      auto it = init.subgraphs.find(name);
      return it == init.subgraphs.end() ? nullptr : it->second;
    };
    decoder_ = sub("decoder");
    initDecoder_ = sub("init_decoder");
    if (!decoder_) {
      fail(init.opType + " needs its decoder subgraph (attribute decoder)");
      return;
    }
    const int64_t modelType = init.attrs.getInt("model_type", 0);
    if (modelType != 0) {
      fail(init.opType + " with model_type " + std::to_string(modelType) +
           " (an encoder-decoder model) is not supported; deepwire runs model_type 0, a GPT-2 "
           "style decoder with past state");
      return;
    }
    if (init.subgraphs.count("encoder")) {
      fail(init.opType +
           " with an encoder subgraph is not supported; use model_type 0 without one");
      return;
    }
    eos_ = init.attrs.getInt("eos_token_id", -1);
    pad_ = init.attrs.getInt("pad_token_id", -1);
    vocabAttr_ = init.attrs.getInt("vocab_size", -1);
    ngram_ = init.attrs.getInt("no_repeat_ngram_size", 0);
    temperature_ = init.attrs.getFloat("temperature", 1.0f);
    topP_ = init.attrs.getFloat("top_p", 0.0f);
    filterValue_ = init.attrs.getFloat("filter_value", -1e20f);
    minKeep_ = init.attrs.getInt("min_tokens_to_keep", 0);
    presencePenalty_ = init.attrs.getFloat("presence_penalty", 0.0f);
    custom_ = init.attrs.getInt("custom", 0) != 0;
    // The decoder's declared interface: input_ids, position_ids, attention_mask, past_0..;
    // logits, present_0.. (ONNX Runtime's names, which it requires too).
    for (const auto& a : init.node->attribute()) {
      if (a.name() != "decoder" || !a.has_g()) continue;
      const auto& g = a.g();
      if (g.input_size() != g.output_size() + 2 || g.output_size() < 2) {
        fail(init.opType + "'s decoder has " + std::to_string(g.input_size()) + " inputs and " +
             std::to_string(g.output_size()) +
             " outputs; it needs input_ids, position_ids, attention_mask and one past_i per "
             "layer, and logits and one present_i per layer (a decoder sharing its past and "
             "present buffers is not supported)");
        return;
      }
      const char* names[] = {"input_ids", "position_ids", "attention_mask"};
      for (int i = 0; i < 3; ++i)
        if (g.input(i).name() != names[i]) {
          fail(init.opType + "'s decoder input " + std::to_string(i) + " must be named " +
               names[i] + ", it is '" + g.input(i).name() + "'");
          return;
        }
      const auto& past = g.input(3).type().tensor_type().shape();
      if (past.dim_size() != 5 || past.dim(2).dim_value() <= 0 || past.dim(4).dim_value() <= 0) {
        fail(init.opType +
             "'s decoder input past_0 must be declared [2, batch, heads, past "
             "length, head size] with the heads and head size as numbers");
        return;
      }
      heads_ = past.dim(2).dim_value();
      headSize_ = past.dim(4).dim_value();
      layers_ = g.output_size() - 1;
    }
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& ids = ctx.input(0);
    if (ids.dtype() != DType::kInt32 || ids.rank() != 2 || ids.dim(0) < 1 || ids.dim(1) < 1)
      return Status::error(
          "input_ids must be int32 [batch, sequence length] with both at least "
          "1, got " +
          std::string(dtypeName(ids.dtype())) + " " + shapeToString(ids.shape()));
    const int64_t B = ids.dim(0), S = ids.dim(1);
    auto scalar = [&](size_t i, const char* name, int64_t fallback) -> Result<int64_t> {
      if (!ctx.hasInput(i)) return fallback;
      const Tensor& t = ctx.input(i);
      if (t.size() != 1)
        return Status::error(std::string(name) + " must hold one value, it has shape " +
                             shapeToString(t.shape()));
      return t.getInt(0);
    };
    auto maxLengthOr = scalar(1, "max_length", 0), minLengthOr = scalar(2, "min_length", 0);
    if (!maxLengthOr) return maxLengthOr.status();
    if (!minLengthOr) return minLengthOr.status();
    const int64_t maxLength = *maxLengthOr, minLength = *minLengthOr;
    // Each new token is one run of the decoder: a damaged or hostile max_length is refused like
    // a Loop's trip count, before anything runs.
    if (maxLength <= S || maxLength - S > maxSteps_)
      return Status::error("max_length (" + std::to_string(maxLength) +
                           ") must be greater than the prompt's length (" + std::to_string(S) +
                           ") by at most " + std::to_string(maxSteps_) +
                           " tokens (the session's loop limit)");
    if (static_cast<double>(B) * static_cast<double>(maxLength) * 8 >
        static_cast<double>(ctx.pool().limit()))
      return Status::error("sequences of " + std::to_string(B) + " x " + std::to_string(maxLength) +
                           " tokens exceed the memory limit");
    float penalty = 1.0f;
    if (ctx.hasInput(3)) {
      if (ctx.input(3).size() != 1 || ctx.input(3).dtype() != DType::kFloat)
        return Status::error("repetition_penalty must be one float32 value");
      penalty = ctx.input(3).data<float>()[0];
      if (!(penalty > 0)) return Status::error("repetition_penalty must be positive");
    }
    const int32_t* id = ids.data<int32_t>();
    const int32_t* attention = nullptr;
    if (ctx.hasInput(6)) {
      const Tensor& m = ctx.input(6);
      if (m.dtype() != DType::kInt32 || m.shape() != ids.shape())
        return Status::error("attention_mask must be int32 of input_ids' shape " +
                             shapeToString(ids.shape()) + ", got " + shapeToString(m.shape()));
      attention = m.data<int32_t>();
    }

    // Positions count the row's tokens that are not padding (a pad's position is 0); without an
    // attention mask, pads are masked.
    // nextPosition: each row's count of real tokens, the position of the token it adds next.
    std::vector<int32_t> position(B * S), mask(B * S), nextPosition(B);
    for (int64_t b = 0; b < B; ++b) {
      int32_t n = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t k = b * S + s;
        const bool pad = id[k] == pad_;
        mask[k] = attention ? attention[k] : (pad ? 0 : 1);
        position[k] = pad ? 0 : n++;
      }
      nextPosition[b] = n;
    }
    std::vector<Value> feeds;
    feeds.emplace_back(Tensor::fromVector(std::vector<int32_t>(id, id + B * S), {B, S}));
    feeds.emplace_back(Tensor::fromVector(position, {B, S}));
    feeds.emplace_back(Tensor::fromVector(mask, {B, S}));
    for (int64_t l = 0; l < layers_; ++l)
      feeds.emplace_back(Tensor(DType::kFloat, {2, B, heads_, 0, headSize_}));

    // The sequences so far, a row each, and which rows have produced the end token.
    std::vector<std::vector<int32_t>> seq(B);
    for (int64_t b = 0; b < B; ++b) seq[b].assign(id + b * S, id + (b + 1) * S);
    std::vector<bool> done(B, false);
    std::vector<float> scores;
    std::vector<int32_t> next(B);
    // Sampling draws from one engine (libstdc++'s default_random_engine, as ONNX Runtime's),
    // seeded once from the seed input (0 without one), so a seed gives ONNX Runtime's tokens.
    std::minstd_rand0 seeded;
    if (sampling_) {
      auto seed = scalar(8, "seed", 0);
      if (!seed) return seed.status();
      seeded.seed(static_cast<uint32_t>(*seed));
    }
    int64_t vocab = 0;
    for (int64_t length0 = S, step = 1; length0 < maxLength; ++step) {
      auto& graph = step == 1 && initDecoder_ ? initDecoder_ : decoder_;
      auto out = graph->run(ctx, feeds);
      if (!out)
        return out.status().withContext("the decoder subgraph, step " + std::to_string(step));
      const Value& logitsValue = (*out)[0];
      if (!logitsValue.isTensor() || logitsValue.tensor.dtype() != DType::kFloat ||
          logitsValue.tensor.rank() != 3 || logitsValue.tensor.dim(0) != B ||
          logitsValue.tensor.dim(1) < 1 || logitsValue.tensor.dim(2) < 1)
        return Status::error("the decoder's logits must be float32 [" + std::to_string(B) +
                             ", length, vocabulary], got " +
                             (logitsValue.isTensor() ? shapeToString(logitsValue.tensor.shape())
                                                     : std::string("no tensor")));
      const Tensor& logits = logitsValue.tensor;
      // The vocabulary, and what depends on it, is checked once: later steps must keep it.
      if (step == 1) {
        vocab = logits.dim(2);
        if (vocabAttr_ > 0 && vocabAttr_ != vocab)
          return Status::error("the decoder's logits have " + std::to_string(vocab) +
                               " tokens, the vocab_size attribute says " +
                               std::to_string(vocabAttr_));
        DW_RETURN_IF_ERROR(checkMasks(ctx, B, vocab));
        if (eos_ < 0 || eos_ >= vocab)
          return Status::error("eos_token_id " + std::to_string(eos_) +
                               " is not a token of the decoder's vocabulary of " +
                               std::to_string(vocab));
      } else if (logits.dim(2) != vocab) {
        return Status::error("the decoder's logits changed from " + std::to_string(vocab) + " to " +
                             std::to_string(logits.dim(2)) + " tokens at step " +
                             std::to_string(step));
      }
      // The last position's logits of each row.
      scores.resize(B * vocab);
      const int64_t L = logits.dim(1);
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(logits.data<float>() + (b * L + L - 1) * vocab, vocab,
                    scores.data() + b * vocab);
      Scores sc{scores.data(), B, vocab};
      process(ctx, sc, seq, penalty, minLength, step);
      if (sampling_)
        sample(sc, seeded, next);
      else
        for (int64_t b = 0; b < B; ++b)
          next[b] =
              static_cast<int32_t>(std::max_element(sc.row(b), sc.row(b) + vocab) - sc.row(b));
      for (int64_t b = 0; b < B; ++b) {
        // NaN scores leave the draw nowhere to land.
        if (next[b] < 0 || next[b] >= vocab)
          return Status::error("the decoder's logits for row " + std::to_string(b) + " at step " +
                               std::to_string(step) + " are not finite numbers; no token drawn");
        if (next[b] == eos_ || done[b]) {
          done[b] = true;
          next[b] = static_cast<int32_t>(pad_);
        }
        seq[b].push_back(next[b]);
      }
      if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
      if (++length0 >= maxLength) break;
      // The next call: the new tokens, their positions, the mask grown by one, pasts = presents.
      if (step > 1)
        for (auto& p : nextPosition) ++p;
      feeds[0] = Value(Tensor::fromVector(next, {B, 1}));
      feeds[1] = Value(Tensor::fromVector(nextPosition, {B, 1}));
      const Tensor& oldMask = feeds[2].tensor;
      std::vector<int32_t> grown(B * length0);
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(oldMask.data<int32_t>() + b * (length0 - 1), length0 - 1,
                    grown.data() + b * length0);
        grown[b * length0 + length0 - 1] = 1;
      }
      feeds[2] = Value(Tensor::fromVector(grown, {B, length0}));
      for (int64_t l = 0; l < layers_; ++l) feeds[3 + l] = (*out)[1 + l];
    }
    DW_ALLOC(y, ctx.output(0, DType::kInt32, {B, maxLength}));
    int32_t* yv = y->data<int32_t>();
    std::fill_n(yv, B * maxLength, 0);
    for (int64_t b = 0; b < B; ++b) std::copy(seq[b].begin(), seq[b].end(), yv + b * maxLength);
    if (sampling_ && ctx.wantsOutput(1)) {
      DW_ALLOC(f, ctx.output(1, DType::kFloat, {B, vocab}));
      std::copy(scores.begin(), scores.end(), f->data<float>());
    }
    return Status();
  }

 private:
  Status checkMasks(KernelContext& ctx, int64_t B, int64_t vocab) {
    auto check = [&](size_t i, const char* name, const Shape& want) {
      if (!ctx.hasInput(i)) return Status();
      const Tensor& t = ctx.input(i);
      if (t.dtype() != DType::kInt32 || t.shape() != want)
        return Status::error(std::string(name) + " must be int32 " + shapeToString(want) +
                             " (the decoder's vocabulary), got " + shapeToString(t.shape()));
      return Status();
    };
    DW_RETURN_IF_ERROR(check(4, "vocab_mask", {vocab}));
    DW_RETURN_IF_ERROR(check(5, "prefix_vocab_mask", {B, vocab}));
    if (sampling_) DW_RETURN_IF_ERROR(check(7, "presence_mask", {B, vocab}));
    return Status();
  }

  // ONNX Runtime's logits processors, in its order: repetition penalty, n-gram blocking, the
  // vocabulary masks (the prefix mask at the first step only), the minimum length, temperature
  // and the presence penalty. The presence penalty applies to the masked tokens, as its
  // definition says; ONNX Runtime 1.30 takes the whole mask's sum off the first score alone.
  void process(KernelContext& ctx, Scores& sc, const std::vector<std::vector<int32_t>>& seq,
               float penalty, int64_t minLength, int64_t step) {
    const int64_t V = sc.vocab;
    if (penalty != 1.0f)
      for (int64_t b = 0; b < sc.rows; ++b) {
        std::unordered_set<int32_t> seen(seq[b].begin(), seq[b].end());
        for (int32_t t : seen) {
          if (t < 0 || t >= V) continue;
          float& s = sc.row(b)[t];
          s = s < 0 ? s * penalty : s / penalty;
        }
      }
    if (ngram_ > 0)
      for (int64_t b = 0; b < sc.rows; ++b) {
        const auto& q = seq[b];
        const int64_t n = static_cast<int64_t>(q.size()), prefix = ngram_ - 1;
        if (ngram_ > n) continue;
        for (int64_t j = 0; j + ngram_ <= n; ++j)
          if (std::equal(q.begin() + j, q.begin() + j + prefix, q.end() - prefix)) {
            const int32_t t = q[j + prefix];
            if (t >= 0 && t < V) sc.row(b)[t] = kLowest;
          }
      }
    if (ctx.hasInput(4)) {
      const int32_t* m = ctx.input(4).data<int32_t>();
      for (int64_t b = 0; b < sc.rows; ++b)
        for (int64_t t = 0; t < V; ++t)
          if (m[t] == 0) sc.row(b)[t] = kLowest;
    }
    if (ctx.hasInput(5) && step == 1) {
      const int32_t* m = ctx.input(5).data<int32_t>();
      for (int64_t b = 0; b < sc.rows; ++b)
        for (int64_t t = 0; t < V; ++t)
          if (m[b * V + t] == 0) sc.row(b)[t] = kLowest;
    }
    if (minLength > 0 && static_cast<int64_t>(seq[0].size()) < minLength)
      for (int64_t b = 0; b < sc.rows; ++b) sc.row(b)[eos_] = kLowest;
    if (sampling_ && temperature_ > 0 && temperature_ != 1.0f)
      for (int64_t i = 0; i < sc.rows * V; ++i) sc.v[i] /= temperature_;
    if (sampling_ && ctx.hasInput(7) && presencePenalty_ != 0.0f) {
      const int32_t* m = ctx.input(7).data<int32_t>();
      for (int64_t i = 0; i < sc.rows * V; ++i) sc.v[i] -= m[i] * presencePenalty_;
    }
  }

  // Top-p filtering, then one draw per row from the softmax of what is left. The tokens are
  // sorted by score, ascending (descending with `custom`), their probabilities accumulated in
  // that order, and those the rule drops get filter_value; a uniform draw picks from the
  // cumulative distribution of exp(score - max).
  void sample(Scores& sc, std::minstd_rand0& engine, std::vector<int32_t>& next) {
    const int64_t V = sc.vocab;
    std::vector<int64_t> order(V);
    std::vector<float> sorted(V), cumulative(V);
    std::vector<double> cdf(V);
    for (int64_t b = 0; b < sc.rows; ++b) {
      float* s = sc.row(b);
      for (int64_t i = 0; i < V; ++i) order[i] = i;
      auto before = [&](float u, float v) { return custom_ ? u > v : u < v; };
      std::sort(order.begin(), order.end(),
                [&](int64_t i, int64_t j) { return before(s[i], s[j]); });
      std::copy_n(s, V, sorted.begin());
      std::sort(sorted.begin(), sorted.end(), before);
      const float top = *std::max_element(sorted.begin(), sorted.end());
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(sorted[i] - top));
      for (int64_t i = 0; i < V; ++i)
        cumulative[i] = static_cast<float>(std::exp(static_cast<double>(sorted[i] - top)) / sum);
      auto drop = [&](int64_t k) { s[order[k]] = filterValue_; };
      if (custom_) {
        if (cumulative[0] > topP_) drop(1);
        for (int64_t j = 1; j + 1 < V; ++j) {
          cumulative[j] += cumulative[j - 1];
          if (cumulative[j] > topP_) drop(j + 1);
        }
      } else {
        if (cumulative[0] <= 1 - topP_) drop(0);
        for (int64_t j = 1; j < V - minKeep_; ++j) {
          cumulative[j] += cumulative[j - 1];
          if (cumulative[j] <= 1 - topP_) drop(j);
        }
      }
    }
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int64_t b = 0; b < sc.rows; ++b) {
      const float* s = sc.row(b);
      float top = kLowest;
      for (int64_t i = 0; i < V; ++i)
        if (std::isfinite(s[i])) top = std::max(top, s[i]);
      double total = 0;
      for (int64_t i = 0; i < V; ++i) {
        if (std::isfinite(s[i])) total += std::exp(static_cast<double>(s[i]) - top);
        cdf[i] = total;
      }
      const double find = uniform(engine) * total;
      next[b] = static_cast<int32_t>(std::upper_bound(cdf.begin(), cdf.end(), find) - cdf.begin());
    }
  }

  bool sampling_;
  int64_t maxSteps_;
  std::shared_ptr<Subgraph> decoder_, initDecoder_;
  int64_t eos_ = -1, pad_ = -1, vocabAttr_ = -1, ngram_ = 0, minKeep_ = 0;
  int64_t heads_ = 0, headSize_ = 0, layers_ = 0;
  float temperature_ = 1.0f, topP_ = 0.0f, filterValue_ = -1e20f, presencePenalty_ = 0.0f;
  bool custom_ = false;
};

}  // namespace

void addGenerationKernels(KernelRegistry& r) {
  const std::string ms = dw::kMicrosoftDomain;
  for (const char* op : {"GreedySearch", "Sampling"})
    r.add(kReferenceTable, op, 1, kMaxOpset, &makeKernel<GptGeneration>, false, ms);
}

}  // namespace dw::engine
