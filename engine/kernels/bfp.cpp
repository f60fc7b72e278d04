// com.microsoft's block floating point pair, QuantizeBFP and DequantizeBFP. ONNX Runtime declares
// them and names two formats in its BFPType enum, BFP_1_8_8_16 and BFP_1_4_8_16 (sign bits,
// mantissa bits, exponent bits, values per block), but has no kernel and defines no byte layout
// (its documentation points to the MSFP paper and to hardware). deepwire fixes one, documented
// in the catalogue's entries (nodes/microsoft_domain.cpp), which the palette and `deepwire nodes`
// show, so that what QuantizeBFP writes DequantizeBFP reads back:
//
// - Blocks of 16 values run along block_dim. A line whose length is not a multiple of 16 ends
//   in a block padded with zeros.
// - Blocks are stored in the order of their first value in the original tensor's memory, which
//   `strides` (in elements, a dense layout) describes; QuantizeBFP writes row-major strides.
// - A block is a little-endian bit stream, whole bytes: an 8-bit shared exponent E (bias 127,
//   as float32's), then per value a code of M+1 bits, its magnitude m in the low M bits and its
//   sign above them. A value is (-1)^sign * m * 2^(E - 127 - (M - 1)). M is 8 (type 0, 19 bytes
//   a block) or 4 (type 1, 11 bytes).
// - Quantizing takes E from the block's largest magnitude (its float exponent + 127, at least 0,
//   at most 254, raised by one where rounding would carry out of M bits), rounds magnitudes to
//   nearest even and saturates at 2^M - 1. NaN and infinity have no code and are refused.
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "nodes/catalogue.h"
#include "nodes/microsoft_domain.h"

namespace dw::engine {

namespace {

constexpr int64_t kBlock = 16;

struct BfpFormat {
  int mantissa = 0;   // M
  int64_t bytes = 0;  // per block
};

Result<BfpFormat> formatOf(int64_t type) {
  if (const std::string why = bfpTypeProblem(type); !why.empty()) return Status::error(why);
  const int mantissa = type == 0 ? 8 : 4;
  return BfpFormat{mantissa, (8 + kBlock * (mantissa + 1)) / 8};
}

// Where the blocks of a tensor lie: iterating `order` (axes from the outermost in memory) over
// `extent` (block_dim counted in blocks) visits them in storage order.
struct BlockLayout {
  Shape shape;
  int64_t axis = 0;                               // block_dim, made non-negative
  int64_t blocks = 0;                             // in all
  std::vector<int64_t> order, extent, rowStride;  // rowStride: of the row-major tensor

  // Block `b`'s first value: its row-major offset, and how many of the block's values the line
  // along block_dim still has (16 but in a line's last block).
  struct Place {
    int64_t offset = 0, values = 0;
  };
  Place place(int64_t b) const {
    Place p;
    for (size_t k = order.size(); k-- > 0;) {
      const int64_t a = order[k], i = b % extent[a];
      b /= extent[a];
      p.offset += (a == axis ? i * kBlock : i) * rowStride[a];
      if (a == axis) p.values = std::min(kBlock, shape[a] - i * kBlock);
    }
    return p;
  }
};

Result<BlockLayout> layoutOf(Shape shape, const std::vector<int64_t>& strides, int64_t blockDim) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) return Status::error("shape is empty; a BFP tensor has at least one axis");
  if (static_cast<int64_t>(strides.size()) != rank)
    return Status::error("strides has " + std::to_string(strides.size()) + " values for " +
                         std::to_string(rank) + " axes of shape " + shapeToString(shape));
  if (blockDim < -rank || blockDim >= rank)
    return Status::error("block_dim " + std::to_string(blockDim) + " is outside the " +
                         std::to_string(rank) + " axes of shape " + shapeToString(shape));
  BlockLayout l;
  l.axis = blockDim < 0 ? blockDim + rank : blockDim;
  for (int64_t d : shape)
    if (d < 0) return Status::error("shape " + shapeToString(shape) + " has a negative size");
  // The layout must be dense: sorted by stride, each axis's stride is the product of the sizes
  // inside it (axes of size 1 may have any stride).
  l.order.resize(rank);
  std::iota(l.order.begin(), l.order.end(), 0);
  std::stable_sort(l.order.begin(), l.order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t inner = 1;
  bool dense = true;
  for (size_t k = l.order.size(); k-- > 0 && !empty;) {
    const int64_t a = l.order[k];
    if (shape[a] == 1) continue;
    dense &= strides[a] == inner;
    if (__builtin_mul_overflow(inner, shape[a], &inner))
      return Status::error("shape " + shapeToString(shape) + " overflows 64 bits");
  }
  if (!dense) {
    int64_t s = 1;
    std::vector<int64_t> rowMajor(rank);
    for (int64_t a = rank; a-- > 0;) rowMajor[a] = s, s *= std::max<int64_t>(shape[a], 1);
    return Status::error("strides " + shapeToString(strides) + " are not a dense layout of " +
                         shapeToString(shape) +
                         " (each axis's stride, in elements, the product "
                         "of the sizes of the axes inside it; row-major is " +
                         shapeToString(rowMajor) + ")");
  }
  l.extent.assign(shape.begin(), shape.end());
  l.extent[l.axis] = (shape[l.axis] + kBlock - 1) / kBlock;
  l.blocks = empty ? 0 : 1;
  for (int64_t e : l.extent)
    if (!empty && __builtin_mul_overflow(l.blocks, e, &l.blocks))
      return Status::error("shape " + shapeToString(shape) + " overflows 64 bits");
  l.rowStride.resize(rank);
  for (int64_t a = rank, s = 1; a-- > 0;) l.rowStride[a] = s, s *= shape[a];
  l.shape = std::move(shape);
  return l;
}

// Bits in and out of a block, least significant first.
struct BitWriter {
  uint8_t* p;
  int64_t bit = 0;
  void put(uint32_t v, int n) {
    for (int i = 0; i < n; ++i, ++bit)
      if (v >> i & 1u) p[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
  }
};
struct BitReader {
  const uint8_t* p;
  int64_t bit = 0;
  uint32_t get(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i, ++bit)
      v |= static_cast<uint32_t>(p[bit >> 3] >> (bit & 7) & 1u) << i;
    return v;
  }
};

class DequantizeBfp : public Kernel {
 public:
  explicit DequantizeBfp(const KernelInit& init)
      : type_(init.attrs.getInt("bfp_type")),
        blockDim_(init.attrs.getInt("block_dim")),
        to_(dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("dtype")))) {
    if (auto f = formatOf(type_); !f) fail(f.status().message());
    if (to_ != DType::kFloat && to_ != DType::kFloat16 && to_ != DType::kBFloat16)
      fail("dtype " + std::to_string(init.attrs.getInt("dtype")) +
           " is not 1 (float), 10 (float16) or 16 (bfloat16)");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kUInt8)
      return Status::error(std::string("x must be uint8 bytes, got ") + dtypeName(x.dtype()));
    for (size_t i : {size_t{1}, size_t{2}})
      if (ctx.input(i).dtype() != DType::kInt64 || ctx.input(i).shape().size() > 1)
        return Status::error(std::string(i == 1 ? "shape" : "strides") +
                             " must be a list of int64, got " + dtypeName(ctx.input(i).dtype()) +
                             " " + shapeToString(ctx.input(i).shape()));
    auto layout = layoutOf(ctx.input(1).toInt64Vector(), ctx.input(2).toInt64Vector(), blockDim_);
    if (!layout) return layout.status();
    const BfpFormat f = *formatOf(type_);
    const BlockLayout& l = *layout;
    int64_t want = 0;
    if (__builtin_mul_overflow(l.blocks, f.bytes, &want) || want != x.size())
      return Status::error("x holds " + std::to_string(x.size()) + " bytes; shape " +
                           shapeToString(l.shape) + " with block_dim " + std::to_string(l.axis) +
                           " makes " + std::to_string(l.blocks) + " blocks of " +
                           std::to_string(f.bytes) + " bytes (bfp_type " + std::to_string(type_) +
                           ")" + (want ? ", " + std::to_string(want) + " bytes" : "") +
                           "; the QuantizeBFP that wrote x must have had the same block_dim and "
                           "bfp_type, and this shape");
    DW_ALLOC(y, ctx.output(0, to_, l.shape));
    const uint8_t* in = x.data<uint8_t>();
    const int64_t step = l.rowStride[l.axis];
    const uint32_t magnitude = (1u << f.mantissa) - 1;
    forThreadRanges(l.blocks, l.blocks * kBlock, [&](int64_t from, int64_t to) {
      for (int64_t b = from; b < to; ++b) {
        BitReader r{in + b * f.bytes};
        const int exponent = static_cast<int>(r.get(8)) - 127 - (f.mantissa - 1);
        const auto [first, valid] = l.place(b);
        for (int64_t k = 0; k < kBlock; ++k) {
          const uint32_t code = r.get(f.mantissa + 1);
          if (k >= valid) continue;
          const float v = std::ldexp(static_cast<float>(code & magnitude), exponent);
          storeFloat(*y, first + k * step, code >> f.mantissa ? -v : v);
        }
      }
    });
    return Status();
  }

 private:
  int64_t type_, blockDim_;
  DType to_;
};

class QuantizeBfp : public Kernel {
 public:
  explicit QuantizeBfp(const KernelInit& init)
      : type_(init.attrs.getInt("bfp_type")), blockDim_(init.attrs.getInt("block_dim")) {
    if (auto f = formatOf(type_); !f) fail(f.status().message());
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat && x.dtype() != DType::kFloat16 && x.dtype() != DType::kBFloat16)
      return Status::error(std::string("x must be float, float16 or bfloat16, got ") +
                           dtypeName(x.dtype()));
    const Shape& shape = x.shape();
    const int64_t rank = static_cast<int64_t>(shape.size());
    std::vector<int64_t> strides(rank);
    for (int64_t a = rank, s = 1; a-- > 0;) strides[a] = s, s *= std::max<int64_t>(shape[a], 1);
    auto layout = layoutOf(shape, strides, blockDim_);
    if (!layout) return layout.status();
    const BlockLayout& l = *layout;
    const BfpFormat f = *formatOf(type_);
    for (int64_t i = 0; i < x.size(); ++i)
      if (!std::isfinite(loadFloat(x, i)))
        return Status::error("x holds " + std::to_string(loadFloat(x, i)) + " at flat index " +
                             std::to_string(i) + "; BFP has no code for NaN or infinity");
    DW_ALLOC(y, ctx.output(0, DType::kUInt8, Shape{l.blocks * f.bytes}));
    DW_ALLOC(shapeOut, ctx.output(1, DType::kInt64, Shape{rank}));
    DW_ALLOC(stridesOut, ctx.output(2, DType::kInt64, Shape{rank}));
    std::copy(shape.begin(), shape.end(), shapeOut->data<int64_t>());
    std::copy(strides.begin(), strides.end(), stridesOut->data<int64_t>());
    uint8_t* out = y->data<uint8_t>();
    std::memset(out, 0, static_cast<size_t>(y->size()));
    const int64_t step = l.rowStride[l.axis];
    const double top = std::ldexp(1.0, f.mantissa) - 1;
    forThreadRanges(l.blocks, l.blocks * kBlock, [&](int64_t from, int64_t to) {
      float v[kBlock];
      for (int64_t b = from; b < to; ++b) {
        const auto [first, valid] = l.place(b);
        float largest = 0;
        for (int64_t k = 0; k < kBlock; ++k) {
          v[k] = k < valid ? loadFloat(x, first + k * step) : 0.0f;
          largest = std::max(largest, std::fabs(v[k]));
        }
        int e = 0;
        if (largest > 0) {
          std::frexp(largest, &e);  // largest = f * 2^e, f in [0.5, 1)
          e = std::clamp(e - 1 + 127, 0, 254);
        }
        auto scaled = [&](int biased, float value) {
          return std::nearbyint(std::ldexp(static_cast<double>(std::fabs(value)),
                                           -(biased - 127 - (f.mantissa - 1))));
        };
        if (e < 254 && scaled(e, largest) > top) ++e;
        BitWriter w{out + b * f.bytes};
        w.put(static_cast<uint32_t>(e), 8);
        for (int64_t k = 0; k < kBlock; ++k) {
          const auto m = static_cast<uint32_t>(std::min(scaled(e, v[k]), top));
          w.put(m | (m && std::signbit(v[k]) ? 1u << f.mantissa : 0u), f.mantissa + 1);
        }
      }
    });
    return Status();
  }

 private:
  int64_t type_, blockDim_;
};

}  // namespace

void addBfpKernels(KernelRegistry& r) {
  const std::string ms = dw::kMicrosoftDomain;
  const char* h = kReferenceTable;
  r.add(h, "QuantizeBFP", 1, kMaxOpset, &makeKernel<QuantizeBfp>, false, ms);
  r.add(h, "DequantizeBFP", 1, kMaxOpset, &makeKernel<DequantizeBfp>, false, ms);
}

}  // namespace dw::engine
