// ai.onnx operators added after opset 17 that have no older relative to share a kernel with:
// AffineGrid (20), Col2Im (18), DeformConv (19), ImageDecoder (20), RegexFullMatch (20),
// StringSplit (20),
// TensorScatter (24), BitCast (26), LinearAttention (27), CausalConvWithState (27) and SwiGLU
// (28). Each follows the ONNX definition; tests/golden/ort-onnx holds ONNX Runtime 1.30's
// outputs for those it runs (up to opset 26), tests/engine/opset18_ops_test.cpp worked values
// for the rest.
#include <re2/re2.h>

#include <cmath>
#include <cstring>

#include "engine/kernels/common.h"
#include "engine/kernels/tables.h"
#include "engine/training/image_folder.h"
#include "engine/unary_op.h"
#include "nodes/catalogue.h"

namespace dw::engine {

namespace {

// LpNormalization (opset 1, an old op without a kernel until now): x divided by its L1 or L2
// norm along `axis`; a vector of norm 0 stays 0, as in ONNX Runtime.
class LpNormalization : public Kernel {
 public:
  explicit LpNormalization(const KernelInit& init)
      : p_(init.attrs.getInt("p", 2)), axis_(init.attrs.getInt("axis", -1)) {
    if (p_ != 1 && p_ != 2) fail("p is " + std::to_string(p_) + "; it must be 1 or 2");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (!validDimAxis(axis_, x.rank())) return axisError(axis_, x.rank());
    const int64_t a = normAxis(axis_, x.rank());
    int64_t outer = 1, n = x.dim(a), inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    for (size_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(d);
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* src = x.data<T>();
      T* dst = y->data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* v = src + o * n * inner + i;
          double norm = 0;
          for (int64_t k = 0; k < n; ++k)
            norm += p_ == 1 ? std::abs(double(v[k * inner])) : double(v[k * inner]) * v[k * inner];
          if (p_ == 2) norm = std::sqrt(norm);
          for (int64_t k = 0; k < n; ++k)
            dst[o * n * inner + i + k * inner] =
                norm == 0 ? T(0) : static_cast<T>(v[k * inner] / norm);
        }
      return Status();
    });
  }

 private:
  int64_t p_, axis_;
};

// ImageDecoder: a PNG or JPEG file's bytes (uint8, 1-D) to uint8 pixels [H, W, 3] in RGB or
// BGR order, or [H, W, 1] grey (PIL's luma, as ONNX's reference). ONNX also lists BMP, TIFF,
// WebP, JPEG 2000 and PNM; deepwire decodes PNG and JPEG (libpng, libjpeg-turbo).
class ImageDecoder : public Kernel {
 public:
  explicit ImageDecoder(const KernelInit& init)
      : format_(init.attrs.getString("pixel_format", "RGB")) {
    if (format_ != "RGB" && format_ != "BGR" && format_ != "Grayscale")
      fail("pixel_format '" + format_ + "' must be RGB, BGR or Grayscale");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kUInt8 || x.rank() != 1)
      return Status::error("encoded_stream must be a 1-D uint8 tensor holding the file's bytes");
    const std::string bytes(reinterpret_cast<const char*>(x.raw()), static_cast<size_t>(x.size()));
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
    const bool png = bytes.size() >= 4 && b[0] == 0x89 && b[1] == 'P' && b[2] == 'N' && b[3] == 'G';
    const bool jpeg = bytes.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
    if (!png && !jpeg)
      return Status::error("encoded_stream (" + std::to_string(bytes.size()) +
                           " bytes) is neither a PNG nor a JPEG, the formats deepwire decodes "
                           "(a PNG starts with 89 50 4E 47, a JPEG with FF D8 FF)");
    auto img = training::decodeImageBytes(bytes, "encoded_stream", format_ == "Grayscale" ? 1 : 3);
    if (!img) return img.status();
    DW_ALLOC(y, ctx.output(0, DType::kUInt8, img->shape()));
    uint8_t* out = y->data<uint8_t>();
    std::memcpy(out, img->raw(), img->bytes());
    if (format_ == "BGR")
      for (int64_t i = 0; i + 2 < y->size(); i += 3) std::swap(out[i], out[i + 2]);
    return Status();
  }

 private:
  std::string format_;
};

// AffineGrid: for each batch entry, the affine map theta ([N, 2, 3] or [N, 3, 4]) applied to
// the normalized coordinates of every output position, x first. `size` is the output image's
// [N, C, H, W] or [N, C, D, H, W]; the grid is [N, H, W, 2] or [N, D, H, W, 3].
class AffineGrid : public Kernel {
 public:
  explicit AffineGrid(const KernelInit& init)
      : alignCorners_(init.attrs.getInt("align_corners", 0) != 0) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& theta = ctx.input(0);
    const std::vector<int64_t> size = ctx.input(1).toInt64Vector();
    if (size.size() != 4 && size.size() != 5)
      return Status::error("size must hold 4 values (N, C, H, W) or 5 (N, C, D, H, W), got " +
                           shapeToString(size));
    const int64_t sd = static_cast<int64_t>(size.size()) - 2;  // spatial dims: 2 or 3
    for (int64_t v : size)
      if (v < 0) return Status::error("size " + shapeToString(size) + " has a negative entry");
    if (theta.rank() != 3 || theta.dim(0) != size[0] || theta.dim(1) != sd ||
        theta.dim(2) != sd + 1)
      return Status::error("theta of shape " + shapeToString(theta.shape()) +
                           " does not fit size " + shapeToString(size) + ": it must be [N, " +
                           std::to_string(sd) + ", " + std::to_string(sd + 1) + "]");
    const int64_t N = size[0];
    // Spatial extents in x, y (, z) order: the grid's last axis lists coordinates that way.
    std::vector<int64_t> ext(size.rbegin(), size.rbegin() + sd);
    Shape out{N};
    for (int64_t i = 0; i < sd; ++i) out.push_back(size[2 + i]);
    out.push_back(sd);
    DW_ALLOC(y, ctx.output(0, theta.dtype(), out));
    // One position with align_corners has no span to align: the spec leaves it undefined, and
    // it sits at the centre, 0, as in PyTorch's affine_grid.
    auto coord = [&](int64_t i, int64_t len) -> double {
      if (alignCorners_) return len > 1 ? -1.0 + 2.0 * i / (len - 1) : 0.0;
      return (2.0 * i + 1.0) / len - 1.0;
    };
    int64_t points = 1;
    for (int64_t e : ext) points *= e;
    return dispatchFloat(theta.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* th = theta.data<T>();
      T* g = y->data<T>();
      for (int64_t n = 0; n < N; ++n) {
        const T* m = th + n * sd * (sd + 1);
        for (int64_t p = 0; p < points; ++p) {
          // p runs over (d,) h, w with w fastest: coordinate 0 is x along w.
          double c[3] = {0, 0, 0};
          int64_t rest = p;
          for (int64_t k = 0; k < sd; ++k) {
            c[k] = coord(rest % ext[k], ext[k]);
            rest /= ext[k];
          }
          T* o = g + (n * points + p) * sd;
          for (int64_t r = 0; r < sd; ++r) {
            double v = m[r * (sd + 1) + sd];
            for (int64_t k = 0; k < sd; ++k) v += m[r * (sd + 1) + k] * c[k];
            o[r] = static_cast<T>(v);
          }
        }
      }
      return Status();
    });
  }

 private:
  bool alignCorners_;
};

// Where Col2Im's columns sit in its image: input [N, C * prod(block_shape), L] holds, for each
// channel and block offset k (row-major over block_shape), one value per block position l
// (row-major over the grid of positions). Any number of spatial dimensions; pads as begins
// then ends.
class BlockLayout {
 public:
  Status plan(const std::vector<int64_t>& image, const std::vector<int64_t>& block,
              const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads,
              const std::vector<int64_t>& strides, const Shape& columns) {
    const size_t r = image.size();
    if (r == 0 || block.size() != r)
      return Status::error("image_shape " + shapeToString(image) + " and block_shape " +
                           shapeToString(block) + " must have the same, non-zero length");
    image_ = image;
    block_ = block;
    dil_ = dilations.empty() ? std::vector<int64_t>(r, 1) : dilations;
    str_ = strides.empty() ? std::vector<int64_t>(r, 1) : strides;
    pads_ = pads.empty() ? std::vector<int64_t>(2 * r, 0) : pads;
    if (dil_.size() != r || str_.size() != r || pads_.size() != 2 * r)
      return Status::error("dilations and strides need " + std::to_string(r) + " values and pads " +
                           std::to_string(2 * r) +
                           " (one per image dimension, pads as begins then ends)");
    K_ = 1;
    L_ = 1;
    pixels_ = 1;
    grid_.assign(r, 0);
    // Sizes past 2^31 per dimension, or products past 2^62, are no image: refused before any
    // arithmetic on them can overflow.
    constexpr int64_t kDimLimit = int64_t{1} << 31, kProductLimit = int64_t{1} << 62;
    for (size_t d = 0; d < r; ++d) {
      if (image[d] > kDimLimit || block[d] > kDimLimit || dil_[d] > kDimLimit ||
          str_[d] > kDimLimit || pads_[d] > kDimLimit || pads_[d + r] > kDimLimit)
        return Status::error("image_shape " + shapeToString(image) + ", block_shape " + shapeToString(block) +
                             " or the window attributes exceed 2^31");
      if (image[d] <= 0 || block[d] <= 0 || dil_[d] <= 0 || str_[d] <= 0 || pads_[d] < 0 ||
          pads_[d + r] < 0)
        return Status::error(
            "image_shape, block_shape, dilations and strides must be positive "
            "and pads non-negative");
      const int64_t span = dil_[d] * (block[d] - 1) + 1;
      const int64_t room = image[d] + pads_[d] + pads_[d + r] - span;
      if (room < 0)
        return Status::error("block_shape " + shapeToString(block) + " does not fit the padded image " +
                             shapeToString(image) + " in dimension " + std::to_string(d));
      grid_[d] = room / str_[d] + 1;
      if (K_ > kProductLimit / block[d] || L_ > kProductLimit / grid_[d] ||
          pixels_ > kProductLimit / image[d])
        return Status::error("image_shape " + shapeToString(image) + " and block_shape " +
                             shapeToString(block) + " make more elements than a tensor can hold");
      K_ *= block[d];
      L_ *= grid_[d];
      pixels_ *= image[d];
    }
    if (columns.size() != 3 || columns[1] % K_ != 0 || columns[2] != L_)
      return Status::error("columns of shape " + shapeToString(columns) +
                           " do not match: they must be [N, C * prod(block_shape), blocks] with "
                           "dimension 1 a multiple of prod(block_shape) = " +
                           std::to_string(K_) + " and dimension 2 the number of blocks, " +
                           std::to_string(L_));
    return Status();
  }
  int64_t blockSize() const { return K_; }
  int64_t blocks() const { return L_; }
  int64_t pixels() const { return pixels_; }
  // f(column, pixel) for each column entry (k * L + l) of one channel whose block position
  // falls inside the image.
  template <class F>
  void walk(F&& f) const {
    const size_t r = image_.size();
    std::vector<int64_t> kpos(r), lpos(r);
    for (int64_t k = 0; k < K_; ++k) {
      for (int64_t rest = k, d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
        kpos[d] = rest % block_[d];
        rest /= block_[d];
      }
      for (int64_t l = 0; l < L_; ++l) {
        for (int64_t rest = l, d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
          lpos[d] = rest % grid_[d];
          rest /= grid_[d];
        }
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d < r && inside; ++d) {
          const int64_t p = lpos[d] * str_[d] - pads_[d] + kpos[d] * dil_[d];
          inside = p >= 0 && p < image_[d];
          off = off * image_[d] + p;
        }
        if (inside) f(k * L_ + l, off);
      }
    }
  }

 private:
  std::vector<int64_t> image_, block_, dil_, str_, pads_, grid_;
  int64_t K_ = 1, L_ = 1, pixels_ = 1;
};

// Col2Im: the inverse of extracting sliding blocks: each column's values are added back into
// the image at the positions its block covered. Col2ImGrad (com.deepwire.grad; inputs dY, X,
// image_shape, block_shape) gathers them back: the gradient of the columns.
class Col2Im : public Kernel {
 public:
  explicit Col2Im(const KernelInit& init)
      : grad_(init.opType == "Col2ImGrad"),
        dilations_(init.attrs.getInts("dilations")),
        pads_(init.attrs.getInts("pads")),
        strides_(init.attrs.getInts("strides")) {}

  Status compute(KernelContext& ctx) override {
    const int first = grad_ ? 2 : 1;
    const Tensor& src = ctx.input(0);
    const Shape& columns = grad_ ? ctx.input(1).shape() : src.shape();
    const std::vector<int64_t> image = ctx.input(first).toInt64Vector();
    BlockLayout b;
    DW_RETURN_IF_ERROR(
        b.plan(image, ctx.input(first + 1).toInt64Vector(), dilations_, pads_, strides_, columns));
    const int64_t N = columns[0], C = columns[1] / b.blockSize(), per = b.blockSize() * b.blocks();
    Shape imageShape{N, C};
    imageShape.insert(imageShape.end(), image.begin(), image.end());
    if (grad_ && src.shape() != imageShape)
      return Status::error("dY of shape " + shapeToString(src.shape()) + " is not the image " +
                           shapeToString(imageShape));
    DW_ALLOC(y, ctx.output(0, src.dtype(), grad_ ? columns : imageShape));
    return dispatchNumeric(src.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* in = src.data<T>();
      T* out = y->data<T>();
      std::fill_n(out, y->size(), T(0));
      for (int64_t nc = 0; nc < N * C; ++nc) {
        const T* colsIn = in + nc * (grad_ ? b.pixels() : per);
        T* dst = out + nc * (grad_ ? per : b.pixels());
        if (grad_)
          b.walk([&](int64_t col, int64_t px) { dst[col] = colsIn[px]; });
        else
          b.walk([&](int64_t col, int64_t px) { dst[px] = static_cast<T>(dst[px] + colsIn[col]); });
      }
      return Status();
    });
  }

 private:
  bool grad_;
  std::vector<int64_t> dilations_, pads_, strides_;
};

// TensorScatter: a key/value cache updated in place. `update` is written into `past_cache` along
// `axis` (not the batch axis), batch entry b from position write_indices[b] (0 without them);
// in circular mode positions wrap around the cache's length.
class TensorScatter : public Kernel {
 public:
  explicit TensorScatter(const KernelInit& init)
      : axis_(init.attrs.getInt("axis", -2)), mode_(init.attrs.getString("mode", "linear")) {
    if (mode_ != "linear" && mode_ != "circular")
      fail("mode '" + mode_ + "' must be linear or circular");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& past = ctx.input(0);
    const Tensor& upd = ctx.input(1);
    const size_t r = past.rank();
    if (r < 2 || upd.rank() != r || upd.dtype() != past.dtype())
      return Status::error(
          "past_cache and update must have the same dtype and rank (2 or more); "
          "got " +
          shapeToString(past.shape()) + " and " + shapeToString(upd.shape()));
    if (!validDimAxis(axis_, r)) return axisError(axis_, r);
    const int64_t a = normAxis(axis_, r);
    if (a == 0) return Status::error("axis must not be the batch axis 0");
    for (size_t d = 0; d < r; ++d)
      if (static_cast<int64_t>(d) != a && upd.dim(d) != past.dim(d))
        return Status::error("update " + shapeToString(upd.shape()) + " and past_cache " +
                             shapeToString(past.shape()) + " differ outside axis " +
                             std::to_string(a));
    const int64_t B = past.dim(0), maxSeq = past.dim(a), seq = upd.dim(a);
    if (seq > maxSeq)
      return Status::error("update's " + std::to_string(seq) +
                           " positions do not fit the cache's " + std::to_string(maxSeq));
    std::vector<int64_t> idx(static_cast<size_t>(B), 0);
    if (ctx.hasInput(2)) {
      idx = ctx.input(2).toInt64Vector();
      if (static_cast<int64_t>(idx.size()) != B)
        return Status::error("write_indices holds " + std::to_string(idx.size()) +
                             " values for a batch of " + std::to_string(B));
    }
    const bool circular = mode_ == "circular";
    for (int64_t b = 0; b < B; ++b)
      if (!circular && (idx[b] < 0 || idx[b] > maxSeq - seq))
        return Status::error("write_indices[" + std::to_string(b) +
                             "] = " + std::to_string(idx[b]) + " puts " + std::to_string(seq) +
                             " positions outside the cache's " + std::to_string(maxSeq) +
                             " (mode linear)");
    // The cache is updated in place where this node is its last reader.
    DW_ALLOC(y, past.dtype() == DType::kString
                    ? ctx.output(0, past.dtype(), past.shape())
                    : ctx.outputReusing(0, 0, past.dtype(), past.shape()));
    if (past.dtype() == DType::kString || y->raw() != past.raw())
      copyElems(past, 0, *y, 0, past.size());
    // Rows of `inner` elements: everything after the axis moves together.
    int64_t outer = 1, inner = 1;
    for (int64_t d = 1; d < a; ++d) outer *= past.dim(d);
    for (size_t d = a + 1; d < r; ++d) inner *= past.dim(d);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t s = 0; s < seq; ++s) {
          // Circular: reduced first, so that no index near the int64 limits overflows.
          const int64_t pos =
              circular ? (((idx[b] % maxSeq) + maxSeq) % maxSeq + s) % maxSeq : idx[b] + s;
          const int64_t to = ((b * outer + o) * maxSeq + pos) * inner;
          const int64_t from = ((b * outer + o) * seq + s) * inner;
          copyElems(upd, from, *y, to, inner);
        }
    return Status();
  }

 private:
  int64_t axis_;
  std::string mode_;
};

// BitCast: the same bytes read as another type of the same width; the shape does not change.
class BitCast : public Kernel {
 public:
  explicit BitCast(const KernelInit& init)
      : to_(dtypeFromOnnx(static_cast<int32_t>(init.attrs.getInt("to", 0)))) {
    if (to_ == DType::kUndefined || to_ == DType::kString)
      fail("to = " + std::to_string(init.attrs.getInt("to", 0)) +
           " is not a type deepwire holds as fixed-width elements (float, double, float16, "
           "bfloat16, int8-64, uint8-64, bool)");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DType::kString || dtypeSize(x.dtype()) != dtypeSize(to_))
      return Status::error(std::string("cannot reinterpret ") + dtypeName(x.dtype()) + " as " +
                           dtypeName(to_) + ": BitCast needs types of the same width");
    DW_ALLOC(y, ctx.output(0, to_, x.shape()));
    std::memcpy(y->raw(), x.raw(), x.bytes());
    return Status();
  }

 private:
  DType to_;
};

// StringSplit: each string split on a literal delimiter, or with none on runs of whitespace
// (leading and trailing whitespace ignored), at most maxsplit times. Y pads each row with empty
// strings to the longest; Z holds each element's count. Where ONNX's Python reference (str.split)
// and ONNX Runtime differ, this follows ONNX Runtime: an empty string has no pieces whatever the
// delimiter, and the unsplit rest after maxsplit splits on whitespace loses its trailing
// whitespace.
class StringSplit : public Kernel {
 public:
  explicit StringSplit(const KernelInit& init)
      : delim_(init.attrs.getString("delimiter", "")),
        maxSplit_(init.attrs.has("maxsplit") ? init.attrs.getInt("maxsplit") : -1) {}

  static bool space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
  }

  std::vector<std::string> split(const std::string& s) const {
    std::vector<std::string> out;
    int64_t splits = 0;
    const bool limited = maxSplit_ >= 0;
    if (delim_.empty()) {
      size_t i = 0;
      while (true) {
        while (i < s.size() && space(s[i])) ++i;
        if (i == s.size()) break;
        if (limited && splits == maxSplit_) {
          size_t end = s.size();
          while (end > i && space(s[end - 1])) --end;
          out.push_back(s.substr(i, end - i));
          break;
        }
        size_t j = i;
        while (j < s.size() && !space(s[j])) ++j;
        out.push_back(s.substr(i, j - i));
        ++splits;
        i = j;
      }
      return out;
    }
    if (s.empty()) return out;
    size_t i = 0;
    while (true) {
      const size_t j = limited && splits == maxSplit_ ? std::string::npos : s.find(delim_, i);
      if (j == std::string::npos) {
        out.push_back(s.substr(i));
        break;
      }
      out.push_back(s.substr(i, j - i));
      ++splits;
      i = j + delim_.size();
    }
    return out;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kString) return Status::error("X must be a string tensor");
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.size()));
    int64_t most = 0;
    for (int64_t i = 0; i < x.size(); ++i) {
      parts[i] = split(x.strings()[i]);
      most = std::max<int64_t>(most, static_cast<int64_t>(parts[i].size()));
    }
    Shape ys = x.shape();
    ys.push_back(most);
    DW_ALLOC(y, ctx.output(0, DType::kString, ys));
    for (int64_t i = 0; i < x.size(); ++i)
      for (size_t k = 0; k < parts[i].size(); ++k) y->strings()[i * most + k] = parts[i][k];
    if (ctx.numOutputs() > 1) {
      Tensor* z = ctx.output(1, DType::kInt64, x.shape());
      if (!z) return ctx.status();
      for (int64_t i = 0; i < x.size(); ++i)
        z->data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
    }
    return Status();
  }

 private:
  std::string delim_;
  int64_t maxSplit_;
};

// RegexFullMatch: whether each string matches `pattern` as a whole, in RE2's syntax (which
// ONNX specifies), UTF-8.
class RegexFullMatch : public Kernel {
 public:
  explicit RegexFullMatch(const KernelInit& init) {
    if (!init.attrs.has("pattern")) {
      fail("RegexFullMatch needs the pattern attribute");
      return;
    }
    re_ = std::make_unique<RE2>(init.attrs.getString("pattern"), RE2::Quiet);
    if (!re_->ok())
      fail("pattern '" + init.attrs.getString("pattern") +
           "' is not a valid RE2 expression: " + re_->error());
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kString) return Status::error("X must be a string tensor");
    DW_ALLOC(y, ctx.output(0, DType::kBool, x.shape()));
    for (int64_t i = 0; i < x.size(); ++i)
      y->data<bool>()[i] = RE2::FullMatch(x.strings()[i], *re_);
    return Status();
  }

 private:
  std::unique_ptr<RE2> re_;
};

// Swish (x * sigmoid(alpha x)) as ops/unary_table.h defines it, for the kernels that apply it
// to their results.
UnaryInstance swish(float alpha) { return resolveUnary(*ops::findUnaryOp("Swish"), alpha, NAN); }

// SwiGLU: A * sigmoid(alpha * A) * B, elementwise on two tensors of one shape.
class SwiGlu : public Kernel {
 public:
  explicit SwiGlu(const KernelInit& init) : swish_(swish(init.attrs.getFloat("alpha", 1.0f))) {}

  Status compute(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.shape() != b.shape() || a.dtype() != b.dtype())
      return Status::error("A " + shapeToString(a.shape()) + " and B " + shapeToString(b.shape()) +
                           " must have the same shape and dtype (SwiGLU does not broadcast)");
    DW_ALLOC(y, ctx.output(0, a.dtype(), a.shape()));
    return dispatchFloat(a.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* pb = b.data<T>();
      T* py = y->data<T>();
      swish_.apply(a.data<T>(), py, a.size());
      for (int64_t i = 0; i < a.size(); ++i) py[i] *= pb[i];
      return Status();
    });
  }

 private:
  UnaryInstance swish_;
};

// CausalConvWithState: a depthwise 1-D convolution over [B, C, L] that sees only the past,
// continuing from past_state (the last k - 1 inputs of the previous call, zeros without it),
// with an optional SiLU. present_state holds the last k - 1 positions for the next call.
class CausalConvWithState : public Kernel {
 public:
  explicit CausalConvWithState(const KernelInit& init)
      : silu_(init.attrs.getString("activation", "none") != "none"), swish_(swish(1.0f)) {
    const std::string act = init.attrs.getString("activation", "none");
    if (act != "none" && act != "silu" && act != "swish")
      fail("activation '" + act + "' must be none, silu or swish");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    if (x.rank() != 3 || w.rank() != 3 || w.dim(0) != x.dim(1) || w.dim(1) != 1 || w.dim(2) < 1)
      return Status::error("input must be [B, C, L] and weight [C, 1, k] with k >= 1; got " +
                           shapeToString(x.shape()) + " and " + shapeToString(w.shape()));
    const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), K = w.dim(2);
    const bool bias = ctx.hasInput(2), past = ctx.hasInput(3);
    if (bias && ctx.input(2).size() != C)
      return Status::error("bias must hold C = " + std::to_string(C) + " values");
    if (past && ctx.input(3).shape() != Shape{B, C, K - 1})
      return Status::error(
          "past_state must be [B, C, k - 1] = " + shapeToString(Shape{B, C, K - 1}) + ", got " +
          shapeToString(ctx.input(3).shape()));
    DW_ALLOC(y, ctx.output(0, x.dtype(), x.shape()));
    Tensor* state = nullptr;
    if (ctx.numOutputs() > 1) {
      state = ctx.output(1, x.dtype(), {B, C, K - 1});
      if (!state) return ctx.status();
    }
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      std::vector<T> row(static_cast<size_t>(L + K - 1));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) {
          // The padded row: past state (or zeros), then the input.
          for (int64_t j = 0; j < K - 1; ++j)
            row[j] = past ? ctx.input(3).data<T>()[(b * C + c) * (K - 1) + j] : T(0);
          std::copy_n(x.data<T>() + (b * C + c) * L, L, row.begin() + (K - 1));
          const T* wc = w.data<T>() + c * K;
          T* out = y->data<T>() + (b * C + c) * L;
          for (int64_t t = 0; t < L; ++t) {
            T v = bias ? ctx.input(2).data<T>()[c] : T(0);
            for (int64_t j = 0; j < K; ++j) v += wc[j] * row[t + j];
            out[t] = v;
          }
          if (silu_) swish_.apply(out, out, L);
          if (state) std::copy_n(row.begin() + L, K - 1, state->data<T>() + (b * C + c) * (K - 1));
        }
      return Status();
    });
  }

 private:
  bool silu_;
  UnaryInstance swish_;
};

// LinearAttention: attention as a recurrence over a state S [dk, dv] per batch entry and KV
// head, in float32: optionally decayed by exp(decay) (gated rules), updated with k (v - S^T k)
// scaled by beta (delta rules) or k v^T, and read by each query head of the group after the
// step's update: o = scale * S^T q.
class LinearAttention : public Kernel {
 public:
  explicit LinearAttention(const KernelInit& init)
      : qHeads_(init.attrs.getInt("q_num_heads", 0)),
        kvHeads_(init.attrs.getInt("kv_num_heads", 0)),
        rule_(init.attrs.getString("update_rule", "gated_delta")),
        scale_(init.attrs.getFloat("scale", 0.0f)) {
    if (qHeads_ <= 0 || kvHeads_ <= 0 || qHeads_ % kvHeads_ != 0)
      fail("q_num_heads (" + std::to_string(qHeads_) +
           ") must be a positive multiple of "
           "kv_num_heads (" +
           std::to_string(kvHeads_) + ")");
    if (rule_ != "linear" && rule_ != "gated" && rule_ != "delta" && rule_ != "gated_delta")
      fail("update_rule '" + rule_ + "' must be linear, gated, delta or gated_delta");
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& q = ctx.input(0);
    const Tensor& k = ctx.input(1);
    const Tensor& v = ctx.input(2);
    if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3 || k.dim(0) != q.dim(0) ||
        v.dim(0) != q.dim(0) || k.dim(1) != q.dim(1) || v.dim(1) != q.dim(1))
      return Status::error("query, key and value must be [B, T, heads * size] with one B and T");
    const int64_t B = q.dim(0), T = q.dim(1), Hq = qHeads_, Hk = kvHeads_;
    if (q.dim(2) % Hq || v.dim(2) % Hk || k.dim(2) != Hk * (q.dim(2) / Hq))
      return Status::error("the last dimensions of query " + shapeToString(q.shape()) + ", key " +
                           shapeToString(k.shape()) + " and value " + shapeToString(v.shape()) +
                           " do not split into " + std::to_string(Hq) + " query and " +
                           std::to_string(Hk) + " key/value heads of one key size");
    const int64_t dk = q.dim(2) / Hq, dv = v.dim(2) / Hk, G = Hq / Hk;
    const bool gated = rule_ == "gated" || rule_ == "gated_delta";
    const bool delta = rule_ == "delta" || rule_ == "gated_delta";
    const bool hasDecay = ctx.hasInput(4), hasBeta = ctx.hasInput(5);
    if (gated != hasDecay)
      return Status::error("update_rule " + rule_ + (gated ? " needs" : " takes no") +
                           " decay (input 4)");
    if (delta != hasBeta)
      return Status::error("update_rule " + rule_ + (delta ? " needs" : " takes no") +
                           " beta (input 5)");
    bool decayPerDim = false;
    if (hasDecay) {
      const Shape& d = ctx.input(4).shape();
      decayPerDim = d == Shape{B, T, Hk * dk};
      if (!decayPerDim && d != Shape{B, T, Hk})
        return Status::error("decay must be [B, T, kv_heads * dk] or [B, T, kv_heads], got " +
                             shapeToString(d));
    }
    bool betaPerHead = false;
    if (hasBeta) {
      const Shape& bs = ctx.input(5).shape();
      betaPerHead = bs == Shape{B, T, Hk};
      if (!betaPerHead && bs != Shape{B, T, 1})
        return Status::error("beta must be [B, T, kv_heads] or [B, T, 1], got " +
                             shapeToString(bs));
    }
    const Shape stateShape{B, Hk, dk, dv};
    if (ctx.hasInput(3) && ctx.input(3).shape() != stateShape)
      return Status::error("past_state must be " + shapeToString(stateShape) + ", got " +
                           shapeToString(ctx.input(3).shape()));
    const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(dk));
    DW_ALLOC(y, ctx.output(0, q.dtype(), {B, T, Hq * dv}));
    Tensor* present = nullptr;
    if (ctx.numOutputs() > 1) {
      present = ctx.output(1, ctx.hasInput(3) ? ctx.input(3).dtype() : q.dtype(), stateShape);
      if (!present) return ctx.status();
    }
    // Every input as float32 once (the rules run in float32), not read element by element.
    auto load = [](const Tensor& t) {
      std::vector<float> f(static_cast<size_t>(t.size()));
      for (int64_t i = 0; i < t.size(); ++i) f[i] = static_cast<float>(t.getDouble(i));
      return f;
    };
    const std::vector<float> Q = load(q), Kf = load(k), V = load(v);
    const std::vector<float> decay = hasDecay ? load(ctx.input(4)) : std::vector<float>();
    const std::vector<float> betas = hasBeta ? load(ctx.input(5)) : std::vector<float>();
    const std::vector<float> past = ctx.hasInput(3) ? load(ctx.input(3)) : std::vector<float>();
    std::vector<float> S(static_cast<size_t>(dk * dv)), r(static_cast<size_t>(dv));
    std::vector<float> out(static_cast<size_t>(y->size())), last(numElements(stateShape));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hk; ++h) {
        for (int64_t i = 0; i < dk * dv; ++i)
          S[i] = past.empty() ? 0.0f : past[(b * Hk + h) * dk * dv + i];
        for (int64_t t = 0; t < T; ++t) {
          const int64_t kb = (b * T + t) * Hk * dk + h * dk;
          const int64_t vb = (b * T + t) * Hk * dv + h * dv;
          if (gated)
            for (int64_t d = 0; d < dk; ++d) {
              const float g =
                  std::exp(decay[decayPerDim ? kb + d : (b * T + t) * Hk + h]);
              for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= g;
            }
          const float beta =
              delta ? betas[(b * T + t) * (betaPerHead ? Hk : 1) + (betaPerHead ? h : 0)] : 1.0f;
          for (int64_t m = 0; m < dv; ++m) {
            float u = V[vb + m];
            if (delta) {
              float sk = 0;
              for (int64_t d = 0; d < dk; ++d) sk += S[d * dv + m] * Kf[kb + d];
              u = beta * (u - sk);
            }
            r[m] = u;
          }
          for (int64_t d = 0; d < dk; ++d) {
            const float kd = Kf[kb + d];
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kd * r[m];
          }
          for (int64_t g = 0; g < G; ++g) {
            const int64_t qh = h * G + g;
            const int64_t qb = (b * T + t) * Hq * dk + qh * dk;
            for (int64_t m = 0; m < dv; ++m) {
              float o = 0;
              for (int64_t d = 0; d < dk; ++d) o += Q[qb + d] * S[d * dv + m];
              out[(b * T + t) * Hq * dv + qh * dv + m] = scale * o;
            }
          }
        }
        std::copy(S.begin(), S.end(), last.begin() + (b * Hk + h) * dk * dv);
      }
    auto store = [](const std::vector<float>& from, Tensor& to) {
      return dispatchFloat(to.dtype(), [&](auto z) -> Status {
        using T = decltype(z);
        std::transform(from.begin(), from.end(), to.data<T>(),
                       [](float f) { return static_cast<T>(f); });
        return Status();
      });
    };
    DW_RETURN_IF_ERROR(store(out, *y));
    return present ? store(last, *present) : Status();
  }

 private:
  int64_t qHeads_, kvHeads_;
  std::string rule_;
  float scale_;
};

// DeformConv (2-D): a convolution whose every tap reads the input at its regular position
// moved by a learned (dy, dx) offset per output position (offset channels laid out as
// [offset_group][kH][kW][y, x]), bilinearly interpolated with zeros outside the image, and
// optionally scaled by a mask ([offset_group][kH][kW]). DeformConvGrad (com.deepwire.grad;
// inputs dY, X, W, offset, mask?) gives dX, dW, doffset, dB and dmask.
class DeformConv : public Kernel {
 public:
  explicit DeformConv(const KernelInit& init)
      : grad_(init.opType == "DeformConvGrad"),
        dilations_(init.attrs.getInts("dilations")),
        kernel_(init.attrs.getInts("kernel_shape")),
        pads_(init.attrs.getInts("pads")),
        strides_(init.attrs.getInts("strides")),
        group_(init.attrs.getInt("group", 1)),
        offsetGroup_(init.attrs.getInt("offset_group", 1)) {}

  Status compute(KernelContext& ctx) override {
    const size_t at = grad_ ? 1 : 0;  // where X is
    const Tensor& x = ctx.input(at);
    const Tensor& w = ctx.input(at + 1);
    const Tensor& off = ctx.input(at + 2);
    const size_t maskAt = 4, biasAt = 3;  // grad: dY, X, W, offset, mask
    const bool mask = ctx.hasInput(maskAt), bias = !grad_ && ctx.hasInput(biasAt);
    DW_RETURN_IF_ERROR(plan(x, w, off, mask ? &ctx.input(maskAt).shape() : nullptr));
    if (bias && ctx.input(biasAt).size() != OC_)
      return Status::error("B must hold " + std::to_string(OC_) + " values");
    const Shape yShape{N_, OC_, OH_, OW_};
    if (grad_ && ctx.input(0).shape() != yShape)
      return Status::error("dY of shape " + shapeToString(ctx.input(0).shape()) +
                           " is not the output's " + shapeToString(yShape));
    return dispatchFloat(x.dtype(), [&](auto z) -> Status {
      using T = decltype(z);
      const T* M = mask ? ctx.input(maskAt).data<T>() : nullptr;
      if (!grad_) {
        DW_ALLOC(y, ctx.output(0, x.dtype(), yShape));
        forward<T>(x.data<T>(), w.data<T>(), off.data<T>(), M,
                   bias ? ctx.input(biasAt).data<T>() : nullptr, y->data<T>());
        return Status();
      }
      DW_ALLOC(dx, ctx.output(0, x.dtype(), x.shape()));
      DW_ALLOC(dw, ctx.output(1, x.dtype(), w.shape()));
      DW_ALLOC(doff, ctx.output(2, x.dtype(), off.shape()));
      DW_ALLOC(db, ctx.output(3, x.dtype(), {OC_}));
      T* dm = nullptr;
      if (mask) {
        DW_ALLOC(dmT, ctx.output(4, x.dtype(), ctx.input(maskAt).shape()));
        dm = dmT->data<T>();
      }
      backward<T>(ctx.input(0).data<T>(), x.data<T>(), w.data<T>(), off.data<T>(), M, dx->data<T>(),
                  dw->data<T>(), doff->data<T>(), db->data<T>(), dm);
      return Status();
    });
  }

 private:
  Status plan(const Tensor& x, const Tensor& w, const Tensor& off, const Shape* mask) {
    if (x.rank() != 4 || w.rank() != 4 || off.rank() != 4)
      return Status::error(
          "deepwire's DeformConv takes 2-D images: X [N, C, H, W], W [oC, "
          "C/group, kH, kW] and offset [N, offset_group*kH*kW*2, oH, oW]");
    N_ = x.dim(0), C_ = x.dim(1), H_ = x.dim(2), W_ = x.dim(3), OC_ = w.dim(0);
    kh_ = w.dim(2), kw_ = w.dim(3);
    const int64_t G = group_, OG = offsetGroup_;
    if (!kernel_.empty() && kernel_ != std::vector<int64_t>{kh_, kw_})
      return Status::error("kernel_shape " + shapeToString(kernel_) + " does not match W " +
                           shapeToString(w.shape()));
    if (G <= 0 || OG <= 0 || C_ % G || OC_ % G || C_ % OG || w.dim(1) * G != C_)
      return Status::error("group " + std::to_string(G) + " and offset_group " +
                           std::to_string(OG) + " must divide the " + std::to_string(C_) +
                           " input channels (and group the " + std::to_string(OC_) +
                           " output channels), with W of shape [oC, C/group, kH, kW]");
    auto pick = [](const std::vector<int64_t>& v, size_t n, int64_t dflt) {
      return v.empty() ? std::vector<int64_t>(n, dflt) : v;
    };
    dil_ = pick(dilations_, 2, 1), str_ = pick(strides_, 2, 1), pad_ = pick(pads_, 4, 0);
    if (dil_.size() != 2 || str_.size() != 2 || pad_.size() != 4)
      return Status::error("dilations and strides need 2 values, pads 4");
    for (int64_t v : {dil_[0], dil_[1], str_[0], str_[1]})
      if (v <= 0 || v > (int64_t{1} << 31))
        return Status::error("dilations and strides must be positive (and below 2^31)");
    for (int64_t v : pad_)
      if (v < 0 || v > (int64_t{1} << 31))
        return Status::error("pads must be non-negative (and below 2^31)");
    OH_ = (H_ + pad_[0] + pad_[2] - ((kh_ - 1) * dil_[0] + 1)) / str_[0] + 1;
    OW_ = (W_ + pad_[1] + pad_[3] - ((kw_ - 1) * dil_[1] + 1)) / str_[1] + 1;
    if (OH_ <= 0 || OW_ <= 0) return Status::error("the kernel does not fit the padded image");
    const Shape offShape{N_, OG * kh_ * kw_ * 2, OH_, OW_}, maskShape{N_, OG * kh_ * kw_, OH_, OW_};
    if (off.shape() != offShape)
      return Status::error("offset must be " + shapeToString(offShape) + ", got " +
                           shapeToString(off.shape()));
    if (mask && *mask != maskShape)
      return Status::error("mask must be " + shapeToString(maskShape) + ", got " +
                           shapeToString(*mask));
    return Status();
  }

  // One tap's bilinear read: the four corners' flat positions in the plane (-1 outside) and
  // weights, and the sample position's fractional parts.
  template <class T>
  struct Sample {
    int64_t at[4];
    T wt[4];
    T ah, aw;
  };
  template <class T>
  Sample<T> sample(const T* off, int64_t n, int64_t tap, int64_t i, int64_t j, int64_t oy,
                   int64_t ox) const {
    const int64_t plane = OH_ * OW_, p = oy * OW_ + ox;
    const int64_t base = (n * offsetGroup_ * kh_ * kw_ + tap) * 2;
    const T ph = static_cast<T>(oy * str_[0] - pad_[0] + i * dil_[0]) + off[base * plane + p];
    const T pw = static_cast<T>(ox * str_[1] - pad_[1] + j * dil_[1]) + off[(base + 1) * plane + p];
    Sample<T> s{};
    if (!std::isfinite(ph) || !std::isfinite(pw)) {
      for (int k = 0; k < 4; ++k) s.at[k] = -1;
      return s;
    }
    const T fh = std::floor(ph), fw = std::floor(pw);
    const int64_t h0 = static_cast<int64_t>(std::clamp<T>(fh, -2, H_ + 1));
    const int64_t w0 = static_cast<int64_t>(std::clamp<T>(fw, -2, W_ + 1));
    s.ah = ph - fh;
    s.aw = pw - fw;
    const int64_t hs[4] = {h0, h0, h0 + 1, h0 + 1}, ws[4] = {w0, w0 + 1, w0, w0 + 1};
    const T wt[4] = {(1 - s.ah) * (1 - s.aw), (1 - s.ah) * s.aw, s.ah * (1 - s.aw), s.ah * s.aw};
    for (int k = 0; k < 4; ++k) {
      const bool in = hs[k] >= 0 && hs[k] < H_ && ws[k] >= 0 && ws[k] < W_;
      s.at[k] = in ? hs[k] * W_ + ws[k] : -1;
      s.wt[k] = wt[k];
    }
    return s;
  }

  // The sampled, masked input of image n, im2col-style: [C][kh][kw][OH][OW].
  template <class T>
  void columns(const T* X, const T* off, const T* M, int64_t n, std::vector<T>& cols) const {
    const int64_t K = kh_ * kw_, plane = OH_ * OW_, Cog = C_ / offsetGroup_;
    for (int64_t c = 0; c < C_; ++c) {
      const T* xp = X + (n * C_ + c) * H_ * W_;
      for (int64_t t = 0; t < K; ++t) {
        const int64_t tap = (c / Cog) * K + t;
        for (int64_t p = 0; p < plane; ++p) {
          const Sample<T> s = sample(off, n, tap, t / kw_, t % kw_, p / OW_, p % OW_);
          T v = 0;
          for (int k = 0; k < 4; ++k)
            if (s.at[k] >= 0) v += s.wt[k] * xp[s.at[k]];
          if (M) v *= M[(n * offsetGroup_ * K + tap) * plane + p];
          cols[(c * K + t) * plane + p] = v;
        }
      }
    }
  }

  template <class T>
  void forward(const T* X, const T* Wt, const T* off, const T* M, const T* B, T* Y) const {
    const int64_t K = kh_ * kw_, plane = OH_ * OW_, Cg = C_ / group_, OCg = OC_ / group_;
    std::vector<T> cols(static_cast<size_t>(C_ * K * plane));
    for (int64_t n = 0; n < N_; ++n) {
      columns(X, off, M, n, cols);
      for (int64_t o = 0; o < OC_; ++o) {
        const int64_t g = o / OCg;
        T* yo = Y + (n * OC_ + o) * plane;
        std::fill_n(yo, plane, B ? B[o] : T(0));
        for (int64_t ci = 0; ci < Cg; ++ci)
          for (int64_t t = 0; t < K; ++t) {
            const T wv = Wt[(o * Cg + ci) * K + t];
            const T* col = cols.data() + ((g * Cg + ci) * K + t) * plane;
            for (int64_t p = 0; p < plane; ++p) yo[p] += wv * col[p];
          }
      }
    }
  }

  template <class T>
  void backward(const T* dY, const T* X, const T* Wt, const T* off, const T* M, T* dX, T* dW,
                T* dOff, T* dB, T* dM) const {
    const int64_t K = kh_ * kw_, plane = OH_ * OW_, Cg = C_ / group_, OCg = OC_ / group_;
    const int64_t Cog = C_ / offsetGroup_;
    std::fill_n(dX, N_ * C_ * H_ * W_, T(0));
    std::fill_n(dW, OC_ * Cg * K, T(0));
    std::fill_n(dOff, N_ * offsetGroup_ * K * 2 * plane, T(0));
    std::fill_n(dB, OC_, T(0));
    if (dM) std::fill_n(dM, N_ * offsetGroup_ * K * plane, T(0));
    std::vector<T> cols(static_cast<size_t>(C_ * K * plane)), dcols(cols.size());
    for (int64_t n = 0; n < N_; ++n) {
      columns(X, off, M, n, cols);
      std::fill(dcols.begin(), dcols.end(), T(0));
      for (int64_t o = 0; o < OC_; ++o) {
        const int64_t g = o / OCg;
        const T* dyo = dY + (n * OC_ + o) * plane;
        for (int64_t p = 0; p < plane; ++p) dB[o] += dyo[p];
        for (int64_t ci = 0; ci < Cg; ++ci)
          for (int64_t t = 0; t < K; ++t) {
            const int64_t row = ((g * Cg + ci) * K + t) * plane;
            const T wv = Wt[(o * Cg + ci) * K + t];
            T acc = 0;
            for (int64_t p = 0; p < plane; ++p) {
              acc += dyo[p] * cols[row + p];
              dcols[row + p] += dyo[p] * wv;
            }
            dW[(o * Cg + ci) * K + t] += acc;
          }
      }
      // Through the mask and the bilinear read: to X, to the offsets and to the mask.
      for (int64_t c = 0; c < C_; ++c) {
        const T* xp = X + (n * C_ + c) * H_ * W_;
        T* dxp = dX + (n * C_ + c) * H_ * W_;
        for (int64_t t = 0; t < K; ++t) {
          const int64_t tap = (c / Cog) * K + t;
          const int64_t base = (n * offsetGroup_ * K + tap) * 2;
          for (int64_t p = 0; p < plane; ++p) {
            const Sample<T> s = sample(off, n, tap, t / kw_, t % kw_, p / OW_, p % OW_);
            const T m = M ? M[(n * offsetGroup_ * K + tap) * plane + p] : T(1);
            const T g = dcols[(c * K + t) * plane + p];
            T v[4];
            T sampled = 0;
            for (int k = 0; k < 4; ++k) {
              v[k] = s.at[k] >= 0 ? xp[s.at[k]] : T(0);
              sampled += s.wt[k] * v[k];
              if (s.at[k] >= 0) dxp[s.at[k]] += g * m * s.wt[k];
            }
            if (dM) dM[(n * offsetGroup_ * K + tap) * plane + p] += g * sampled;
            // d sample / d ph and / d pw (corners 0: (h0, w0), 1: (h0, w0+1), 2: (h0+1, w0),
            // 3: (h0+1, w0+1)).
            const T dh = (1 - s.aw) * (v[2] - v[0]) + s.aw * (v[3] - v[1]);
            const T dw = (1 - s.ah) * (v[1] - v[0]) + s.ah * (v[3] - v[2]);
            dOff[base * plane + p] += g * m * dh;
            dOff[(base + 1) * plane + p] += g * m * dw;
          }
        }
      }
    }
  }

  bool grad_;
  std::vector<int64_t> dilations_, kernel_, pads_, strides_;
  int64_t group_, offsetGroup_;
  // Set by plan() for the shapes being run.
  std::vector<int64_t> dil_, str_, pad_;
  int64_t N_ = 0, C_ = 0, H_ = 0, W_ = 0, OC_ = 0, kh_ = 0, kw_ = 0, OH_ = 0, OW_ = 0;
};

}  // namespace

void addOpset18Kernels(KernelRegistry& r) {
  const char* h = kReferenceTable;
  r.add(h, "AffineGrid", 20, kMaxOpset, &makeKernel<AffineGrid>);
  r.add(h, "Col2Im", 18, kMaxOpset, &makeKernel<Col2Im>);
  r.add(h, "Col2ImGrad", 1, kMaxOpset, &makeKernel<Col2Im>, true, dw::kGradDomain);
  r.add(h, "DeformConv", 19, kMaxOpset, &makeKernel<DeformConv>);
  r.add(h, "DeformConvGrad", 1, kMaxOpset, &makeKernel<DeformConv>, true, dw::kGradDomain);
  r.add(h, "ImageDecoder", 20, kMaxOpset, &makeKernel<ImageDecoder>, false);
  r.add(h, "LpNormalization", 1, kMaxOpset, &makeKernel<LpNormalization>);
  r.add(h, "RegexFullMatch", 20, kMaxOpset, &makeKernel<RegexFullMatch>, false);
  r.add(h, "StringSplit", 20, kMaxOpset, &makeKernel<StringSplit>, false);
  r.add(h, "TensorScatter", 24, kMaxOpset, &makeKernel<TensorScatter>, false);
  r.add(h, "BitCast", 26, kMaxOpset, &makeKernel<BitCast>, false);
  r.add(h, "LinearAttention", 27, kMaxOpset, &makeKernel<LinearAttention>);
  r.add(h, "CausalConvWithState", 27, kMaxOpset, &makeKernel<CausalConvWithState>);
  r.add(h, "SwiGLU", 28, kMaxOpset, &makeKernel<SwiGlu>);
}

}  // namespace dw::engine
