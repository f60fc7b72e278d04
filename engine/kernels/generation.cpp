// Text generation loops of com.microsoft (ONNX Runtime's contrib domain): GreedySearch and
// Sampling run a GPT-2-style decoder subgraph once per new token, as ONNX Runtime defines the
// protocol. The decoder takes input_ids, position_ids, attention_mask and one past_i per layer
// ([2, batch, heads, past length, head size]: keys and values so far) and returns logits
// [batch, length, vocabulary] and present_i, which become the next call's past_i. The first call
// sees the whole prompt with empty pasts; every later call one token per row.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
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

// The logits processors the generation loops share, in ONNX Runtime's order: repetition
// penalty, n-gram blocking, the vocabulary masks (the prefix mask at the first step only), the
// minimum length, temperature and the presence penalty. Row r of the scores continues seq[r]
// and belongs to batch item r / beams (the prefix mask's row).
struct ScoreRules {
  float penalty = 1.0f;
  int64_t ngram = 0, minLength = 0, eos = -1, beams = 1;
  const int32_t* vocabMask = nullptr;   // [V]
  const int32_t* prefixMask = nullptr;  // [batch, V]
  float temperature = 1.0f;             // divides the scores where > 0 and not 1
  const int32_t* presence = nullptr;    // [rows, V]
  float presencePenalty = 0.0f;
};

// The presence penalty applies to the masked tokens, as its definition says; ONNX Runtime 1.30
// takes the whole mask's sum off the first score alone.
void applyRules(const ScoreRules& r, Scores& sc, const std::vector<std::vector<int32_t>>& seq,
                int64_t step) {
  const int64_t V = sc.vocab;
  if (r.penalty != 1.0f)
    for (int64_t b = 0; b < sc.rows; ++b) {
      std::unordered_set<int32_t> seen(seq[b].begin(), seq[b].end());
      for (int32_t t : seen) {
        if (t < 0 || t >= V) continue;
        float& s = sc.row(b)[t];
        s = s < 0 ? s * r.penalty : s / r.penalty;
      }
    }
  if (r.ngram > 0)
    for (int64_t b = 0; b < sc.rows; ++b) {
      const auto& q = seq[b];
      const int64_t n = static_cast<int64_t>(q.size()), prefix = r.ngram - 1;
      if (r.ngram > n) continue;
      for (int64_t j = 0; j + r.ngram <= n; ++j)
        if (std::equal(q.begin() + j, q.begin() + j + prefix, q.end() - prefix)) {
          const int32_t t = q[j + prefix];
          if (t >= 0 && t < V) sc.row(b)[t] = kLowest;
        }
    }
  if (r.vocabMask)
    for (int64_t b = 0; b < sc.rows; ++b)
      for (int64_t t = 0; t < V; ++t)
        if (r.vocabMask[t] == 0) sc.row(b)[t] = kLowest;
  if (r.prefixMask && step == 1)
    for (int64_t b = 0; b < sc.rows; ++b)
      for (int64_t t = 0; t < V; ++t)
        if (r.prefixMask[(b / r.beams) * V + t] == 0) sc.row(b)[t] = kLowest;
  if (r.minLength > 0 && static_cast<int64_t>(seq[0].size()) < r.minLength)
    for (int64_t b = 0; b < sc.rows; ++b) sc.row(b)[r.eos] = kLowest;
  if (r.temperature > 0 && r.temperature != 1.0f)
    for (int64_t i = 0; i < sc.rows * V; ++i) sc.v[i] /= r.temperature;
  if (r.presence && r.presencePenalty != 0.0f)
    for (int64_t i = 0; i < sc.rows * V; ++i) sc.v[i] -= r.presence[i] * r.presencePenalty;
}

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
      ScoreRules rules;
      rules.penalty = penalty;
      rules.ngram = ngram_;
      rules.minLength = minLength;
      rules.eos = eos_;
      rules.vocabMask = ctx.hasInput(4) ? ctx.input(4).data<int32_t>() : nullptr;
      rules.prefixMask = ctx.hasInput(5) ? ctx.input(5).data<int32_t>() : nullptr;
      if (sampling_) {
        rules.temperature = temperature_;
        rules.presence = ctx.hasInput(7) ? ctx.input(7).data<int32_t>() : nullptr;
        rules.presencePenalty = presencePenalty_;
      }
      applyRules(rules, sc, seq, step);
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

// WhisperBeamSearch: beam search over an encoder-decoder (Whisper) export, as ONNX Runtime runs
// it. The encoder subgraph takes the audio features (encoder_input_ids, [batch, features,
// frames]) and the prompt (decoder_input_ids) once, unexpanded, and returns the prompt's logits,
// encoder_hidden_states, and per layer the self-attention keys and values, then the
// cross-attention ones. The decoder subgraph takes the chosen tokens ([batch x beams, 1]),
// encoder_hidden_states where its second input has that name, the past self keys and values and
// the cross ones, and returns logits and the present self keys and values, which become the next
// past in the order of the beams chosen. Each step scores the log-softmax of the last logits
// after the processors (ScoreRules, then Whisper's timestamp rules with logits_processor 1) plus
// the beam's score, keeps the best 2 x beams candidates per item, and ends an item once
// num_beams finished hypotheses cannot be beaten (or at once with early_stopping).
class WhisperBeamSearch : public Kernel {
 public:
  explicit WhisperBeamSearch(const KernelInit& init) : maxSteps_(init.maxLoopIterations) {
    auto sub = [&](const char* name) {
      auto it = init.subgraphs.find(name);
      return it == init.subgraphs.end() ? nullptr : it->second;
    };
    encoder_ = sub("encoder");
    decoder_ = sub("decoder");
    if (!encoder_ || !decoder_) {
      fail(
          "WhisperBeamSearch needs its encoder and decoder subgraphs (attributes encoder and "
          "decoder)");
      return;
    }
    if (init.attrs.getInt("model_type", 2) != 2) {
      fail("WhisperBeamSearch's model_type must be 2 (Whisper)");
      return;
    }
    if (init.attrs.getInt("decoder_output_cross_qk", 0) != 0) {
      fail(
          "decoder_output_cross_qk is not supported (ONNX Runtime computes cross_qk on its GPU "
          "only); set it to 0");
      return;
    }
    eos_ = init.attrs.getInt("eos_token_id", -1);
    pad_ = init.attrs.getInt("pad_token_id", -1);
    start_ = init.attrs.getInt("decoder_start_token_id", -1);
    vocabAttr_ = init.attrs.getInt("vocab_size", -1);
    earlyStopping_ = init.attrs.getInt("early_stopping", 0) != 0;
    ngram_ = init.attrs.getInt("no_repeat_ngram_size", 0);
    beginTs_ = init.attrs.getInt("beginning_timestamp_token_id", -1);
    noTs_ = init.attrs.getInt("no_timestamps_token_id", -1);
    startOfLm_ = init.attrs.getInt("start_of_lm_token_id", -1);
    translate_ = init.attrs.getInt("translate_token_id", -1);
    transcribe_ = init.attrs.getInt("transcribe_token_id", -1);
    if (pad_ < 0) {
      fail("pad_token_id must be given (0 or more)");
      return;
    }
    for (const auto& a : init.node->attribute()) {
      if (!a.has_g()) continue;
      const auto& g = a.g();
      if (a.name() == "decoder") {
        hidden_ = g.input_size() > 1 && g.input(1).name() == "encoder_hidden_states";
        const int rest = g.input_size() - 1 - (hidden_ ? 1 : 0);
        if (g.input_size() < 1 || g.input(0).name() != "input_ids" || rest < 4 || rest % 4 ||
            g.output_size() != 1 + rest / 2) {
          fail(
              "WhisperBeamSearch's decoder must take input_ids, optionally "
              "encoder_hidden_states, then past_key_self_i and past_value_self_i for each layer "
              "and the cross ones, and return logits and present_key_self_i and "
              "present_value_self_i; it has " +
              std::to_string(g.input_size()) + " inputs and " + std::to_string(g.output_size()) +
              " outputs");
          return;
        }
        layers_ = rest / 4;
      } else if (a.name() == "encoder") {
        encoderOutputs_ = g.output_size();
        if (g.input_size() != 2) {
          fail("WhisperBeamSearch's encoder must take encoder_input_ids and decoder_input_ids");
          return;
        }
      }
    }
    if (encoderOutputs_ != 2 + 4 * layers_)
      fail(
          "WhisperBeamSearch's encoder must return logits, encoder_hidden_states and the self "
          "and cross keys and values of the decoder's " +
          std::to_string(layers_) + " layers (" + std::to_string(2 + 4 * layers_) +
          " outputs); it has " + std::to_string(encoderOutputs_));
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& features = ctx.input(0);
    if (features.rank() != 3 || !isFloating(features.dtype()))
      return Status::error(
          "input_ids (the audio features) must be float [batch, features, "
          "frames], got " +
          std::string(dtypeName(features.dtype())) + " " + shapeToString(features.shape()));
    const int64_t B = features.dim(0);
    auto intOf = [&](size_t i, const char* name, int64_t fallback) -> Result<int64_t> {
      if (!ctx.hasInput(i)) return fallback;
      if (ctx.input(i).size() != 1)
        return Status::error(std::string(name) + " must hold one value");
      return ctx.input(i).getInt(0);
    };
    auto floatOf = [&](size_t i, const char* name, float fallback) -> Result<float> {
      if (!ctx.hasInput(i)) return fallback;
      if (ctx.input(i).size() != 1 || ctx.input(i).dtype() != DType::kFloat)
        return Status::error(std::string(name) + " must be one float32 value");
      return ctx.input(i).data<float>()[0];
    };
    auto maxLength = intOf(1, "max_length", 4096), minLength = intOf(2, "min_length", 0),
         beams = intOf(3, "num_beams", 1), returns = intOf(4, "num_return_sequences", 1),
         processor = intOf(11, "logits_processor", 0);
    auto lengthPenalty = floatOf(5, "length_penalty", 1.0f),
         penalty = floatOf(6, "repetition_penalty", 1.0f),
         temperature = floatOf(14, "temperature", 1.0f);
    for (const auto* r : {&maxLength, &minLength, &beams, &returns, &processor})
      if (!*r) return r->status();
    for (const auto* r : {&lengthPenalty, &penalty, &temperature})
      if (!*r) return r->status();
    const int64_t K = *beams, R = *returns;
    if (K < 1 || K > 128) return Status::error("num_beams must be 1 to 128");
    if (R < 1 || R > K) return Status::error("num_return_sequences must be 1 to num_beams");
    if (!(*penalty > 0)) return Status::error("repetition_penalty must be positive");
    if (*processor != 0 && *processor != 1)
      return Status::error("logits_processor must be 0 (none) or 1 (Whisper's timestamp rules)");
    if (ctx.hasInput(12) || ctx.wantsOutput(3) || ctx.wantsOutput(4))
      return Status::error(
          "cross_qk and non_speech_probs are not supported (ONNX Runtime "
          "computes them on its GPU only); leave cross_qk_layer_head and those "
          "outputs out");
    // The prompt: decoder_input_ids, else decoder_start_token_id for every item.
    std::vector<int32_t> prompt;
    int64_t L0 = 1;
    if (ctx.hasInput(10)) {
      const Tensor& p = ctx.input(10);
      if (p.dtype() != DType::kInt32 || p.rank() != 2 || p.dim(0) != B || p.dim(1) < 1)
        return Status::error("decoder_input_ids must be int32 [" + std::to_string(B) +
                             ", prompt length], got " + shapeToString(p.shape()));
      L0 = p.dim(1);
      prompt.assign(p.data<int32_t>(), p.data<int32_t>() + B * L0);
    } else {
      if (start_ < 0)
        return Status::error(
            "without decoder_input_ids the prompt is decoder_start_token_id, "
            "which is not set");
      prompt.assign(static_cast<size_t>(B), static_cast<int32_t>(start_));
    }
    if (*maxLength <= L0 || *maxLength - L0 > maxSteps_)
      return Status::error("max_length (" + std::to_string(*maxLength) +
                           ") must be greater than the prompt's length (" + std::to_string(L0) +
                           ") by at most " + std::to_string(maxSteps_) +
                           " tokens (the session's loop limit)");
    const int64_t maxLen = *maxLength;

    // The encoder, once per item.
    std::vector<Value> feeds;
    feeds.emplace_back(features);
    feeds.emplace_back(Tensor::fromVector(prompt, {B, L0}));
    auto enc = encoder_->run(ctx, feeds);
    if (!enc) return enc.status().withContext("the encoder subgraph");
    const Tensor& logits0 = (*enc)[0].tensor;
    if (logits0.dtype() != DType::kFloat || logits0.rank() != 3 || logits0.dim(0) != B ||
        logits0.dim(1) != L0 || logits0.dim(2) < 1)
      return Status::error("the encoder's logits must be float32 [" + std::to_string(B) + ", " +
                           std::to_string(L0) + ", vocabulary], got " +
                           shapeToString(logits0.shape()));
    const int64_t V = logits0.dim(2);
    if (vocabAttr_ > 0 && vocabAttr_ != V)
      return Status::error("the logits have " + std::to_string(V) +
                           " tokens, the vocab_size attribute says " + std::to_string(vocabAttr_));
    if (eos_ < 0 || eos_ >= V)
      return Status::error("eos_token_id " + std::to_string(eos_) +
                           " is not a token of the vocabulary of " + std::to_string(V));
    if (*processor == 1 && !(beginTs_ > 0 && beginTs_ < V))
      return Status::error(
          "logits_processor 1 (timestamps) needs beginning_timestamp_token_id "
          "inside the vocabulary of " +
          std::to_string(V));
    for (auto [i, name, shape] : {std::tuple{size_t{7}, "vocab_mask", Shape{V}},
                                  std::tuple{size_t{8}, "prefix_vocab_mask", Shape{B, V}}})
      if (ctx.hasInput(i) &&
          (ctx.input(i).dtype() != DType::kInt32 || ctx.input(i).shape() != shape))
        return Status::error(std::string(name) + " must be int32 " + shapeToString(shape));
    ScoreRules rules;
    rules.penalty = *penalty;
    rules.ngram = ngram_;
    rules.minLength = *minLength;
    rules.eos = eos_;
    rules.beams = K;
    rules.vocabMask = ctx.hasInput(7) ? ctx.input(7).data<int32_t>() : nullptr;
    rules.prefixMask = ctx.hasInput(8) ? ctx.input(8).data<int32_t>() : nullptr;
    rules.temperature = *temperature;

    const int64_t N = B * K;
    std::vector<std::vector<int32_t>> seq(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r)
      seq[r].assign(prompt.begin() + (r / K) * L0, prompt.begin() + (r / K + 1) * L0);
    std::vector<float> beamScores(N, -1e9f), logits(N * V), scores(N * V);
    for (int64_t b = 0; b < B; ++b) beamScores[b * K] = 0;
    std::vector<std::vector<std::pair<float, std::vector<int32_t>>>> hyps(B);
    std::vector<char> done(B, 0);
    std::vector<float> allScores;  // the scores output, a step after another
    const bool wantScores = ctx.wantsOutput(2);
    std::vector<int64_t> parents(N);
    std::vector<int32_t> tokens(N);
    auto addHyp = [&](int64_t b, const std::vector<int32_t>& t, float s) {
      const float score = s / std::pow(static_cast<float>(t.size()), *lengthPenalty);
      auto& h = hyps[b];
      if (static_cast<int64_t>(h.size()) == K) {
        if (!(score > h.back().first)) return;
        h.pop_back();
      }
      auto at = h.begin();
      while (at != h.end() && !(score > at->first)) ++at;
      h.insert(at, {score, t});
    };

    // One step: `logits` holds each row's last logits.
    auto step = [&](int64_t stepNo) -> Status {
      const int64_t cur = static_cast<int64_t>(seq[0].size());
      for (int64_t r = 0; r < N; ++r) {
        const float* x = &logits[r * V];
        float* s = &scores[r * V];
        const float top = *std::max_element(x, x + V);
        double sum = 0;
        for (int64_t t = 0; t < V; ++t) sum += std::exp(static_cast<double>(x[t] - top));
        const float lse = static_cast<float>(std::log(sum));
        for (int64_t t = 0; t < V; ++t) s[t] = (x[t] - top) - lse;
      }
      Scores sc{scores.data(), N, V};
      applyRules(rules, sc, seq, stepNo);
      if (*processor == 1)
        for (int64_t r = 0; r < N; ++r) timestamps(seq[r], sc.row(r), V);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t t = 0; t < V; ++t) scores[r * V + t] += beamScores[r];
      if (wantScores) allScores.insert(allScores.end(), scores.begin(), scores.end());
      // The best 2K of each item, over its beams' tokens.
      std::vector<int64_t> order(K * V);
      std::vector<float> best2k(B * 2 * K, kLowest);
      std::vector<std::vector<int64_t>> tops(B);
      for (int64_t b = 0; b < B; ++b) {
        const float* flat = &scores[b * K * V];
        for (int64_t i = 0; i < K * V; ++i) order[i] = i;
        const int64_t n = std::min<int64_t>(2 * K, K * V);
        std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int64_t i, int64_t j) {
          return flat[i] > flat[j] || (flat[i] == flat[j] && i < j);
        });
        tops[b].assign(order.begin(), order.begin() + n);
        for (int64_t j = 0; j < n; ++j) best2k[b * 2 * K + j] = flat[order[j]];
      }
      std::vector<float> nextScores(N);
      for (int64_t b = 0; b < B; ++b) {
        if (done[b]) {
          for (int64_t k = 0; k < K; ++k) {
            tokens[b * K + k] = static_cast<int32_t>(pad_);
            parents[b * K + k] = 0;
            nextScores[b * K + k] = 0;
          }
          continue;
        }
        int64_t filled = 0;
        for (size_t j = 0; j < tops[b].size() && filled < K; ++j) {
          const int64_t fi = tops[b][j], token = fi % V, parent = b * K + fi / V;
          const float s = scores[b * K * V + fi];
          if (!std::isfinite(s) && s != kLowest)
            return Status::error("the scores of item " + std::to_string(b) + " at step " +
                                 std::to_string(stepNo) + " are not finite numbers");
          if (token == eos_) {
            if (static_cast<int64_t>(j) < K) addHyp(b, seq[parent], s);
            continue;
          }
          tokens[b * K + filled] = static_cast<int32_t>(token);
          parents[b * K + filled] = parent;
          nextScores[b * K + filled] = s;
          ++filled;
        }
        if (static_cast<int64_t>(hyps[b].size()) == K) {
          if (earlyStopping_) {
            done[b] = 1;
          } else {
            // ONNX Runtime reads the item's best from its [batch, 2K] buffer at b * K (not
            // b * 2K); kept, so that items end where it ends them.
            const float best =
                *std::max_element(best2k.begin() + b * K, best2k.begin() + b * K + 2 * K);
            const float reach = best / std::pow(static_cast<float>(cur), *lengthPenalty);
            if (!(hyps[b].back().first < reach)) done[b] = 1;
          }
        }
      }
      std::vector<std::vector<int32_t>> next(static_cast<size_t>(N));
      for (int64_t r = 0; r < N; ++r) {
        next[r] = seq[parents[r]];
        next[r].push_back(tokens[r]);
      }
      seq.swap(next);
      beamScores = nextScores;
      return Status();
    };

    // Step 1 from the encoder's logits, each item's row repeated for its beams.
    for (int64_t r = 0; r < N; ++r)
      std::copy_n(logits0.data<float>() + ((r / K) * L0 + L0 - 1) * V, V, &logits[r * V]);
    DW_RETURN_IF_ERROR(step(1));
    // The decoder's fixed inputs, expanded to the beams: encoder_hidden_states and the cross
    // keys and values; its self keys and values start from the encoder's.
    auto expand = [&](const Tensor& t) -> Result<Tensor> {
      if (t.rank() < 1 || t.dim(0) != B)
        return Status::error("the encoder's outputs must have the batch (" + std::to_string(B) +
                             ") first, one has shape " + shapeToString(t.shape()));
      Shape sh = t.shape();
      sh[0] = N;
      Tensor out(t.dtype(), sh);
      const size_t row = static_cast<size_t>(t.size() / B) * dtypeSize(t.dtype());
      for (int64_t r = 0; r < N; ++r)
        std::memcpy(static_cast<char*>(out.raw()) + r * row,
                    static_cast<const char*>(t.raw()) + (r / K) * row, row);
      return out;
    };
    auto gather = [&](const Tensor& t) {
      Tensor out(t.dtype(), t.shape());
      const size_t row = static_cast<size_t>(t.size() / N) * dtypeSize(t.dtype());
      for (int64_t r = 0; r < N; ++r)
        std::memcpy(static_cast<char*>(out.raw()) + r * row,
                    static_cast<const char*>(t.raw()) + parents[r] * row, row);
      return out;
    };
    std::vector<Value> dec(1 + (hidden_ ? 1 : 0) + 4 * layers_);
    size_t at = 1;
    if (hidden_) {
      auto h = expand((*enc)[1].tensor);
      if (!h) return h.status();
      dec[at++] = Value(std::move(*h));
    }
    for (int64_t i = 0; i < 4 * layers_; ++i) {
      auto e = expand((*enc)[2 + i].tensor);
      if (!e) return e.status();
      dec[at + i] = Value(std::move(*e));
    }
    for (int64_t cur = L0 + 1; cur < maxLen; ++cur) {
      if (std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
      dec[0] = Value(Tensor::fromVector(tokens, {N, 1}));
      auto out = decoder_->run(ctx, dec);
      if (!out)
        return out.status().withContext("the decoder subgraph, step " +
                                        std::to_string(cur - L0 + 1));
      const Tensor& lg = (*out)[0].tensor;
      if (lg.dtype() != DType::kFloat || lg.rank() != 3 || lg.dim(0) != N || lg.dim(2) != V)
        return Status::error("the decoder's logits must be float32 [" + std::to_string(N) +
                             ", length, " + std::to_string(V) + "], got " +
                             shapeToString(lg.shape()));
      const int64_t len = lg.dim(1);
      for (int64_t r = 0; r < N; ++r)
        std::copy_n(lg.data<float>() + (r * len + len - 1) * V, V, &logits[r * V]);
      DW_RETURN_IF_ERROR(step(cur - L0 + 1));
      for (int64_t i = 0; i < 2 * layers_; ++i) dec[at + i] = Value(gather((*out)[1 + i].tensor));
    }
    // Items still searching offer their live beams.
    const int64_t cur = static_cast<int64_t>(seq[0].size());
    (void)cur;
    for (int64_t b = 0; b < B; ++b)
      if (!done[b])
        for (int64_t k = 0; k < K; ++k) addHyp(b, seq[b * K + k], beamScores[b * K + k]);
    DW_ALLOC(y, ctx.output(0, DType::kInt32, {B, R, maxLen}));
    std::fill_n(y->data<int32_t>(), y->size(), static_cast<int32_t>(pad_));
    Tensor* ys = ctx.wantsOutput(1) ? ctx.output(1, DType::kFloat, {B, R}) : nullptr;
    if (ctx.wantsOutput(1) && !ys) return ctx.status();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r) {
        const auto& [score, t] = hyps[b][r];
        std::copy(t.begin(), t.end(), y->data<int32_t>() + (b * R + r) * maxLen);
        if (ys) ys->data<float>()[b * R + r] = score;
      }
    if (wantScores) {
      DW_ALLOC(sc, ctx.output(2, DType::kFloat, {maxLen - L0, B, K, V}));
      std::fill_n(sc->data<float>(), sc->size(), 0.0f);
      std::copy(allScores.begin(), allScores.end(), sc->data<float>());
    }
    return Status();
  }

 private:
  // Whisper's timestamp rules on one row's scores, `seq` being the row's tokens so far.
  void timestamps(const std::vector<int32_t>& seq, float* s, int64_t V) const {
    const int64_t beg = beginTs_, n = static_cast<int64_t>(seq.size());
    auto ban = [&](int64_t t) {
      if (t >= 0 && t < V) s[t] = kLowest;
    };
    int64_t sampleBegin = 0;
    for (int64_t j = 0; j < n; ++j) {
      ++sampleBegin;
      if (seq[j] >= beg) break;
    }
    ban(noTs_);
    ban(startOfLm_);
    if (n > sampleBegin) ban(start_), ban(translate_), ban(transcribe_);
    const bool lastTs = n > 0 && seq[n - 1] >= beg;
    const bool penTs = n <= sampleBegin || (n >= 2 && seq[n - 2] >= beg);
    if (lastTs) {
      if (penTs)
        for (int64_t t = beg; t < V; ++t) s[t] = kLowest;
      else
        for (int64_t t = 0; t < eos_; ++t) s[t] = kLowest;
    }
    int64_t lastStamp = -1;
    for (int32_t t : seq)
      if (t >= beg) lastStamp = t;
    if (lastStamp >= 0) {
      const int64_t upto = lastTs && !penTs ? lastStamp : lastStamp + 1;
      for (int64_t t = beg; t < std::min(upto, V); ++t) s[t] = kLowest;
    }
    if (n == sampleBegin)  // the first timestamp: at most 50 steps in
      for (int64_t t = beg + 51; t < V; ++t) s[t] = kLowest;
    float top = kLowest;
    for (int64_t t = beg; t < V; ++t) top = std::max(top, s[t]);
    double sum = 0;
    for (int64_t t = beg; t < V; ++t)
      if (s[t] > kLowest) sum += std::exp(static_cast<double>(s[t] - top));
    const float stampLogProb = sum > 0 ? static_cast<float>(std::log(sum)) + top : kLowest;
    float bestText = kLowest;
    for (int64_t t = 0; t < beg; ++t) bestText = std::max(bestText, s[t]);
    if (stampLogProb > bestText)
      for (int64_t t = 0; t < beg; ++t) s[t] = kLowest;
  }

  int64_t maxSteps_;
  std::shared_ptr<Subgraph> encoder_, decoder_;
  bool hidden_ = false, earlyStopping_ = false;
  int64_t layers_ = 0, encoderOutputs_ = 0;
  int64_t eos_ = -1, pad_ = -1, start_ = -1, vocabAttr_ = -1, ngram_ = 0;
  int64_t beginTs_ = -1, noTs_ = -1, startOfLm_ = -1, translate_ = -1, transcribe_ = -1;
};

}  // namespace

void addGenerationKernels(KernelRegistry& r) {
  const std::string ms = dw::kMicrosoftDomain;
  for (const char* op : {"GreedySearch", "Sampling"})
    r.add(kReferenceTable, op, 1, kMaxOpset, &makeKernel<GptGeneration>, false, ms);
  r.add(kReferenceTable, "WhisperBeamSearch", 1, kMaxOpset, &makeKernel<WhisperBeamSearch>, false,
        ms);
}

}  // namespace dw::engine
