// Random generator ops: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
// Bernoulli, Multinomial.
//
// With a `seed` attribute every run starts a fresh generator from that seed, so a model gives the
// same values run after run (what users of a seed expect of an inference engine). Without one,
// each kernel keeps its own generator, seeded once from std::random_device, and every run draws
// new values. The uniform and normal transforms are written out here rather than taken from
// <random>'s distributions, whose algorithms the standard leaves to the library: a seed then
// gives the same values whatever standard library the engine was built with.
#include <algorithm>
#include <bit>
#include <cmath>
#include <mutex>
#include <random>

#include <onnx/onnx_pb.h>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"

namespace dw::engine {

namespace {

class RandomSource {
 public:
  explicit RandomSource(const Attributes& attrs) {
    if (attrs.has("seed")) {
      // ONNX gives the seed as a float: its bit pattern seeds, so 1.5 and 1.0 differ.
      seeded_ = true;
      seed_ = std::bit_cast<uint32_t>(attrs.getFloat("seed"));
    } else {
      std::random_device rd;
      state_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }

  // Calls draw(gen) with the generator for this run; unseeded kernels share one stream across
  // runs (and threads), so the draw holds the lock.
  template <class F>
  Status run(F&& draw) {
    if (seeded_) {
      Gen g(seed_);
      return draw(g);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Gen g(state_);
    Status st = draw(g);
    state_ = g.engine();
    return st;
  }

  class Gen {
   public:
    explicit Gen(uint32_t seed) : e_(seed) {}
    explicit Gen(const std::mt19937_64& e) : e_(e) {}
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(e_() >> 11) * 0x1.0p-53; }
    // Standard normal by Box-Muller; the second value of each pair is kept for the next call.
    double normal() {
      if (hasSpare_) {
        hasSpare_ = false;
        return spare_;
      }
      const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
      const double u2 = uniform();
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double t = 2.0 * M_PI * u2;
      spare_ = r * std::sin(t);
      hasSpare_ = true;
      return r * std::cos(t);
    }
    const std::mt19937_64& engine() const { return e_; }

   private:
    std::mt19937_64 e_;
    double spare_ = 0;
    bool hasSpare_ = false;
  };

 private:
  bool seeded_ = false;
  uint32_t seed_ = 0;
  std::mutex mutex_;
  std::mt19937_64 state_;
};

bool isRandomFloat(DType t) {
  return isFloating(t);
}

// Fills a floating tensor element by element from gen(); narrow types round from double.
template <class F>
Status fillFloating(Tensor* y, F&& gen) {
  const int64_t n = y->size();
  switch (y->dtype()) {
    case DType::kFloat:
      for (int64_t i = 0; i < n; ++i) y->data<float>()[i] = static_cast<float>(gen());
      return Status();
    case DType::kDouble:
      for (int64_t i = 0; i < n; ++i) y->data<double>()[i] = gen();
      return Status();
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i)
        y->data<uint16_t>()[i] = floatToHalf(static_cast<float>(gen()));
      return Status();
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i)
        y->data<uint16_t>()[i] = floatToBf16(static_cast<float>(gen()));
      return Status();
    default:
      return Status::error(std::string("random values of dtype ") + dtypeName(y->dtype()) +
                           " are not supported (float, double, float16 or bfloat16)");
  }
}

// Rounding can lift a value just below `high` onto it (float of 0.99999997 is 1); uniform
// draws must stay in [low, high), so such values step down to the largest one below.
template <class F>
Status fillUniform(Tensor* y, double low, double high, F&& u) {
  Status st = fillFloating(y, [&] { return low + (high - low) * u(); });
  if (!st.ok() || !(high > low)) return st;
  const int64_t n = y->size();
  // Each step moves to the next representable value below, so the loops end.
  auto clampBelow = [&](auto* p, auto toD, auto stepDown) {
    for (int64_t i = 0; i < n; ++i)
      while (toD(p[i]) >= high) p[i] = stepDown(p[i]);
  };
  // float16 and bfloat16 both keep the sign in bit 15 and order magnitudes as integers.
  auto stepDown16 = [](uint16_t b) -> uint16_t {
    if ((b & 0x7fffu) == 0) return 0x8001u;  // +-0 -> smallest negative subnormal
    return (b & 0x8000u) ? b + 1 : b - 1;
  };
  switch (y->dtype()) {
    case DType::kFloat:
      clampBelow(
          y->data<float>(), [](float v) { return v; },
          [](float v) { return std::nextafter(v, -INFINITY); });
      break;
    case DType::kFloat16:
      clampBelow(y->data<uint16_t>(), halfToFloat, stepDown16);
      break;
    case DType::kBFloat16:
      clampBelow(y->data<uint16_t>(), bf16ToFloat, stepDown16);
      break;
    default:
      break;
  }
  return Status();
}

std::string nodeLabel(const KernelInit& init) {
  return "node '" + (init.node ? init.node->name() : std::string()) + "' (" + init.opType + ")";
}

DType dtypeAttr(const KernelInit& init, DType def) {
  if (!init.attrs.has("dtype")) return def;
  return dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("dtype")));
}

// RandomUniform / RandomNormal and their *Like variants share everything but the draw.
class RandomFill : public Kernel {
 public:
  RandomFill(const KernelInit& init, bool normal, bool like)
      : normal_(normal), like_(like), src_(init.attrs) {
    if (normal_) {
      a_ = init.attrs.getFloat("mean");
      b_ = init.attrs.getFloat("scale");
    } else {
      a_ = init.attrs.getFloat("low");
      b_ = init.attrs.getFloat("high");
    }
    const std::string where = nodeLabel(init);
    if (like_) {
      hasDtype_ = init.attrs.has("dtype");
      dtype_ = dtypeAttr(init, DType::kUndefined);
    } else {
      hasDtype_ = true;
      dtype_ = dtypeAttr(init, DType::kFloat);
      if (!init.attrs.has("shape")) {
        fail(where + " needs the 'shape' attribute");
        return;
      }
      shape_ = init.attrs.getInts("shape");
      for (int64_t d : shape_)
        if (d < 0) fail(where + ": shape " + shapeToString(shape_) + " has a negative dimension");
    }
    if (hasDtype_ && !isRandomFloat(dtype_))
      fail(where + ": dtype attribute " + std::to_string(init.attrs.getInt("dtype")) +
           " is not a floating type; use float (1), double (11) or float16 (10)");
    if (!normal_ && !(b_ >= a_))
      fail(where + ": high (" + std::to_string(b_) + ") is below low (" + std::to_string(a_) + ")");
    if (normal_ && !(b_ >= 0))
      fail(where + ": scale (" + std::to_string(b_) + ") must not be negative");
  }

  Status compute(KernelContext& ctx) override {
    Shape shape = shape_;
    DType dtype = dtype_;
    if (like_) {
      const Tensor& x = ctx.input(0);
      shape = x.shape();
      if (!hasDtype_) {
        dtype = x.dtype();
        if (!isRandomFloat(dtype))
          return Status::error(std::string("input dtype ") + dtypeName(dtype) +
                               " is not floating: set the dtype attribute to pick the output type");
      }
    }
    DW_ALLOC(y, ctx.output(0, dtype, shape));
    return src_.run([&](RandomSource::Gen& g) {
      if (normal_) return fillFloating(y, [&] { return a_ + b_ * g.normal(); });
      return fillUniform(y, a_, b_, [&] { return g.uniform(); });
    });
  }

 private:
  bool normal_, like_;
  bool hasDtype_ = false;
  DType dtype_ = DType::kFloat;
  Shape shape_;
  double a_ = 0, b_ = 1;
  RandomSource src_;
};

struct RandomUniform : RandomFill {
  explicit RandomUniform(const KernelInit& i) : RandomFill(i, false, false) {}
};
struct RandomNormal : RandomFill {
  explicit RandomNormal(const KernelInit& i) : RandomFill(i, true, false) {}
};
struct RandomUniformLike : RandomFill {
  explicit RandomUniformLike(const KernelInit& i) : RandomFill(i, false, true) {}
};
struct RandomNormalLike : RandomFill {
  explicit RandomNormalLike(const KernelInit& i) : RandomFill(i, true, true) {}
};

// Element i of a floating input as double.
double floatingAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat:
      return t.data<float>()[i];
    case DType::kDouble:
      return t.data<double>()[i];
    case DType::kFloat16:
      return halfToFloat(t.data<uint16_t>()[i]);
    case DType::kBFloat16:
      return bf16ToFloat(t.data<uint16_t>()[i]);
    default:
      return 0;
  }
}

// y[i] = 1 with probability x[i], else 0.
class Bernoulli : public Kernel {
 public:
  explicit Bernoulli(const KernelInit& init) : src_(init.attrs) {
    if (init.attrs.has("dtype")) {
      dtype_ = dtypeAttr(init, DType::kUndefined);
      if (dtype_ == DType::kUndefined || dtype_ == DType::kString)
        fail(nodeLabel(init) + ": dtype attribute " + std::to_string(init.attrs.getInt("dtype")) +
             " is not a numeric or bool type");
    }
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!isFloating(x.dtype()))
      return Status::error(std::string("Bernoulli probabilities must be floating, got ") +
                           dtypeName(x.dtype()));
    const DType out = dtype_ == DType::kUndefined ? x.dtype() : dtype_;
    DW_ALLOC(y, ctx.output(0, out, x.shape()));
    std::vector<uint8_t> bits(static_cast<size_t>(x.size()));
    Status st = src_.run([&](RandomSource::Gen& g) {
      // NaN probabilities compare false and give 0.
      for (int64_t i = 0; i < x.size(); ++i) bits[i] = g.uniform() < floatingAt(x, i);
      return Status();
    });
    if (!st.ok()) return st;
    if (isFloating(out)) {
      int64_t i = 0;
      return fillFloating(y, [&] { return static_cast<double>(bits[i++]); });
    }
    return dispatchNumericBool(out, [&](auto z) {
      using T = decltype(z);
      for (int64_t i = 0; i < x.size(); ++i) y->data<T>()[i] = static_cast<T>(bits[i]);
      return Status();
    });
  }

 private:
  DType dtype_ = DType::kUndefined;
  RandomSource src_;
};

// Draws sample_size class indices per batch row from unnormalised log-probabilities.
class Multinomial : public Kernel {
 public:
  explicit Multinomial(const KernelInit& init) : src_(init.attrs) {
    samples_ = init.attrs.getInt("sample_size");
    dtype_ = dtypeAttr(init, DType::kInt32);
    const std::string where = nodeLabel(init);
    if (dtype_ != DType::kInt32 && dtype_ != DType::kInt64)
      fail(where + ": dtype must be int32 (6) or int64 (7)");
    if (samples_ < 0) fail(where + ": sample_size must not be negative");
  }
  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2)
      return Status::error("Multinomial input must be [batch_size, class_size], got " +
                           shapeToString(x.shape()));
    if (!isFloating(x.dtype()))
      return Status::error(std::string("Multinomial input must be floating, got ") +
                           dtypeName(x.dtype()));
    const int64_t batch = x.dim(0), classes = x.dim(1);
    if (classes == 0 && samples_ > 0)
      return Status::error("Multinomial input has no classes to sample from");
    DW_ALLOC(y, ctx.output(0, dtype_, {batch, samples_}));
    std::vector<double> cdf(static_cast<size_t>(classes));
    return src_.run([&](RandomSource::Gen& g) -> Status {
      for (int64_t b = 0; b < batch; ++b) {
        double mx = -INFINITY;
        for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, floatingAt(x, b * classes + c));
        if (!std::isfinite(mx))
          return Status::error("Multinomial row " + std::to_string(b) +
                               " has no finite log-probability (all -inf, +inf or NaN)");
        double total = 0;
        for (int64_t c = 0; c < classes; ++c) {
          const double v = floatingAt(x, b * classes + c);
          if (std::isnan(v))
            return Status::error("Multinomial row " + std::to_string(b) + " contains NaN");
          total += std::exp(v - mx);
          cdf[c] = total;
        }
        for (int64_t s = 0; s < samples_; ++s) {
          const double u = g.uniform() * total;
          int64_t k = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
          k = std::min(k, classes - 1);
          // u * total can round up to total, past the last class: step back off trailing
          // zero-probability classes.
          while (k > 0 && cdf[k] == cdf[k - 1]) --k;
          if (dtype_ == DType::kInt32)
            y->data<int32_t>()[b * samples_ + s] = static_cast<int32_t>(k);
          else
            y->data<int64_t>()[b * samples_ + s] = k;
        }
      }
      return Status();
    });
  }

 private:
  int64_t samples_ = 1;
  DType dtype_ = DType::kInt32;
  RandomSource src_;
};

}  // namespace

void addRandomKernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  // Outputs are written in their own dtype (float16 included), so no halfViaFloat.
  r.add(h, "RandomUniform", 1, kMaxOpset, &makeKernel<RandomUniform>, false);
  r.add(h, "RandomNormal", 1, kMaxOpset, &makeKernel<RandomNormal>, false);
  r.add(h, "RandomUniformLike", 1, kMaxOpset, &makeKernel<RandomUniformLike>, false);
  r.add(h, "RandomNormalLike", 1, kMaxOpset, &makeKernel<RandomNormalLike>, false);
  r.add(h, "Bernoulli", 15, kMaxOpset, &makeKernel<Bernoulli>, false);
  r.add(h, "Multinomial", 7, kMaxOpset, &makeKernel<Multinomial>, false);
}

}  // namespace dw::engine
