// Image-folder datasets: listing, PNG (libpng) and JPEG (libjpeg-turbo) decoding with error
// managers that return instead of exiting, channel conversion and our own resampling.
#include "engine/training/image_folder.h"

// jpeglib.h needs FILE and size_t declared before it.
#include <cstdio>
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <thread>

namespace dw::engine::training {

namespace {

namespace fs = std::filesystem;

constexpr const char* kResave = "remove or re-save the file";
constexpr const char* kLayout =
    "an image dataset is a folder with one subfolder per class, each holding that class's PNG or "
    "JPEG files (DIR/cat/001.png, DIR/dog/002.jpg, ...)";
// A corrupt header can claim any size; refusing absurd ones keeps a bad file from exhausting
// memory before its data turns out to be missing.
constexpr int64_t kMaxImageBytes = int64_t(1) << 30;

std::string lowerExtension(const std::string& name) {
  std::string ext = fs::path(name).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool isImageName(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  const std::string ext = lowerExtension(name);
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::string sizeText(int64_t w, int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h);
}

// ---- Listing ----------------------------------------------------------------------------------

struct Listing {
  std::vector<std::string> classes;
  std::vector<std::vector<std::string>> files;  // per class, full paths sorted by file name
  int64_t samples() const {
    int64_t n = 0;
    for (const auto& f : files) n += static_cast<int64_t>(f.size());
    return n;
  }
};

Result<Listing> listFolder(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::error(dir + ": no such folder; " + std::string(kLayout));
  if (!fs::is_directory(dir, ec))
    return Status::error(dir + ": is a file, not a folder; " + std::string(kLayout));
  Listing out;
  int64_t looseImages = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code typeEc;
    if (it->is_directory(typeEc))
      out.classes.push_back(name);
    else if (isImageName(name))
      ++looseImages;
  }
  if (ec) return Status::error(dir + ": cannot list the folder: " + ec.message());
  if (out.classes.empty()) {
    std::string msg = dir + ": no class subfolders: " + kLayout;
    if (looseImages)
      msg += "; move its " + std::to_string(looseImages) +
             " images into one subfolder per class (even a single class needs one)";
    return Status::error(msg);
  }
  std::sort(out.classes.begin(), out.classes.end());
  for (const auto& cls : out.classes) {
    const fs::path classDir = fs::path(dir) / cls;
    std::vector<std::string> names;
    for (fs::directory_iterator it(classDir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code typeEc;
      if (isImageName(name) && it->is_regular_file(typeEc)) names.push_back(name);
    }
    if (ec) return Status::error(classDir.string() + ": cannot list the folder: " + ec.message());
    if (names.empty())
      return Status::error(classDir.string() +
                           ": class folder holds no PNG or JPEG files (other extensions and "
                           "hidden files are ignored); add images to it or remove the folder");
    std::sort(names.begin(), names.end());
    std::vector<std::string> paths;
    paths.reserve(names.size());
    for (const auto& n : names) paths.push_back((classDir / n).string());
    out.files.push_back(std::move(paths));
  }
  return out;
}

// ---- Bytes and format ---------------------------------------------------------------------------

Result<std::string> readFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return Status::error(path + ": cannot open the file (check that it exists and is readable)");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::error(path + ": read error");
  return ss.str();
}

enum class Format { kPng, kJpeg };

const unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// "starts with 68 65 6C 6C 6F 20 77 6F ("hello wo")": the bytes say what the file really is.
std::string describeStart(const std::string& bytes) {
  static const char* hex = "0123456789ABCDEF";
  const size_t n = std::min<size_t>(bytes.size(), 8);
  std::string h, text;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (i) h += ' ';
    h += hex[b >> 4];
    h += hex[b & 15];
    text += (b >= 32 && b < 127) ? static_cast<char>(b) : '.';
  }
  return h + " (\"" + text + "\")";
}

// The format comes from the content, so a PNG saved as .jpg still reads; the extension only
// says what the file claimed to be in the error.
Result<Format> sniff(const std::string& path, const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() >= 8 && std::memcmp(p, kPngSignature, 8) == 0) return Format::kPng;
  if (bytes.size() >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return Format::kJpeg;
  const std::string claimed = lowerExtension(path) == ".png" ? "PNG" : "JPEG";
  if (bytes.empty())
    return Status::error(path + ": the file is empty (0 bytes), not a " + claimed + "; " + kResave);
  return Status::error(path + ": not a " + claimed + ": starts with " + describeStart(bytes) +
                       " where a PNG starts with 89 50 4E 47 and a JPEG with FF D8 FF; " + kResave);
}

// Pixels as the file holds them after the palette/alpha rules: interleaved H x W x c, c 1 or 3.
struct Decoded {
  int64_t height = 0, width = 0, channels = 0;
  // Not a vector: its zero-fill would touch every page before a truncated file's data turns out
  // to be missing, and a corrupt header may claim up to kMaxImageBytes.
  std::unique_ptr<unsigned char[]> pixels;
};

Status tooLarge(const std::string& path, int64_t w, int64_t h, int64_t c) {
  return Status::error(path + ": the header says " + sizeText(w, h) + " with " + std::to_string(c) +
                       " channels, over 1 GiB of pixels; the header is " +
                       "corrupt or the image is far too large for a dataset: " + kResave);
}

// ---- PNG --------------------------------------------------------------------------------------

struct PngContext {
  const unsigned char* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;
  char message[256] = {0};
  std::vector<unsigned char*> rows;  // the caller's: nothing with a destructor lives across setjmp
};

void pngError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}

// Ancillary-chunk warnings (a known-incorrect sRGB profile, say) do not affect the pixels.
void pngWarning(png_structp, png_const_charp) {}

void pngRead(png_structp png, png_bytep out, png_size_t length) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > ctx->size - ctx->pos) {
    ctx->truncated = true;
    png_error(png, "the file ends early");
  }
  std::memcpy(out, ctx->data + ctx->pos, length);
  ctx->pos += length;
}

// C style on purpose: libpng reports errors by longjmp to the setjmp here, so every local that
// lives across it is a plain pointer set before it, and every C++ object is the caller's.
bool decodePngRaw(PngContext* ctx, Decoded* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, pngError, pngWarning);
  if (!png) {
    std::snprintf(ctx->message, sizeof(ctx->message), "libpng could not start (out of memory)");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(ctx->message, sizeof(ctx->message), "libpng could not start (out of memory)");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, ctx, pngRead);
  png_read_info(png, info);
  const int64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  // Palette -> RGB, grey below 8 bits -> 8, tRNS -> alpha; then 16 -> 8 bits (rounded) and no
  // alpha: grey and grey+alpha stay one channel, everything else becomes RGB.
  png_set_expand(png);
  png_set_scale_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int64_t c = png_get_channels(png, info);
  if (w * h * c > kMaxImageBytes) {
    std::snprintf(ctx->message, sizeof(ctx->message), "too large");
    out->height = h, out->width = w, out->channels = c;
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const size_t rowBytes = png_get_rowbytes(png, info);
  out->height = h, out->width = w, out->channels = c;
  out->pixels.reset(new (std::nothrow) unsigned char[static_cast<size_t>(h) * rowBytes]);
  if (!out->pixels) png_error(png, "out of memory for the pixels");
  ctx->rows.resize(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) ctx->rows[y] = out->pixels.get() + y * rowBytes;
  png_read_image(png, ctx->rows.data());
  // No png_read_end: chunks after the image data (text, a missing IEND) cannot change a pixel.
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Result<Decoded> decodePng(const std::string& path, const std::string& bytes) {
  PngContext ctx;
  ctx.data = reinterpret_cast<const unsigned char*>(bytes.data());
  ctx.size = bytes.size();
  Decoded out;
  if (decodePngRaw(&ctx, &out)) return out;
  if (ctx.truncated)
    return Status::error(path + ": truncated after " + std::to_string(bytes.size()) +
                         " bytes (the PNG data ends before the image does); " + kResave);
  if (std::strcmp(ctx.message, "too large") == 0)
    return tooLarge(path, out.width, out.height, out.channels);
  return Status::error(path + ": corrupt PNG: " + ctx.message + "; " + kResave);
}

// IHDR is always the first chunk: width, height, bit depth and colour type at fixed offsets.
Result<Decoded> pngHeader(const std::string& path, const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 26)
    return Status::error(path + ": truncated after " + std::to_string(bytes.size()) +
                         " bytes (the PNG header needs 26); " + kResave);
  if (std::memcmp(p + 12, "IHDR", 4) != 0)
    return Status::error(path + ": corrupt PNG: the first chunk at byte 12 is not IHDR; " +
                         kResave);
  auto be32 = [&](size_t at) {
    return (int64_t(p[at]) << 24) | (int64_t(p[at + 1]) << 16) | (int64_t(p[at + 2]) << 8) |
           int64_t(p[at + 3]);
  };
  Decoded d;
  d.width = be32(16);
  d.height = be32(20);
  switch (p[25]) {
    case 0:
    case 4:
      d.channels = 1;
      break;
    case 2:
    case 3:
    case 6:
      d.channels = 3;
      break;
    default:
      return Status::error(path + ": corrupt PNG: colour type " + std::to_string(p[25]) +
                           " at byte 25 is not one of 0 2 3 4 6; " + kResave);
  }
  if (d.width <= 0 || d.height <= 0)
    return Status::error(path + ": corrupt PNG: the header's size is " +
                         sizeText(d.width, d.height) + "; " + kResave);
  return d;
}

// ---- JPEG -------------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr pub;  // first, so libjpeg's pointer to it is a pointer to the whole
  jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {0};
};

// libjpeg's default error_exit calls exit(); ours jumps back to the decoder, which cleans up.
void jpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

// Warnings that mean the pixels are wrong are errors here: libjpeg would otherwise pad a
// truncated file with grey and carry on. Benign ones (extra bytes between markers) pass.
void jpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace output
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF) {
    e->truncated = true;
    longjmp(e->jump, 1);
  }
  if (code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC || code == JWRN_HUFF_BAD_CODE ||
      code == JWRN_NOT_SEQUENTIAL) {
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
  }
  cinfo->err->num_warnings++;
}

// C style for the same reason as decodePngRaw: only plain locals set before setjmp live across
// it. `headerOnly` stops after the markers, decoding nothing.
bool decodeJpegRaw(const unsigned char* data, unsigned long size, bool headerOnly, JpegError* err,
                   Decoded* out) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->pub);
  err->pub.error_exit = jpegErrorExit;
  err->pub.emit_message = jpegEmitMessage;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  out->width = cinfo.image_width;
  out->height = cinfo.image_height;
  out->channels = cinfo.num_components == 1 ? 1 : 3;
  if (headerOnly) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : (cmyk ? JCS_CMYK : JCS_RGB);
  const int64_t decodedChannels = cinfo.num_components == 1 ? 1 : (cmyk ? 4 : 3);
  if (out->width * out->height * decodedChannels > kMaxImageBytes) {
    std::snprintf(err->message, sizeof(err->message), "too large");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  const size_t stride = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  out->pixels.reset(new (std::nothrow) unsigned char[stride * cinfo.output_height]);
  if (!out->pixels) ERREXIT1(&cinfo, JERR_OUT_OF_MEMORY, 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.get() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // Adobe's CMYK JPEGs store the inks inverted (255 = no ink); libjpeg hands them over as stored.
  const bool inverted = cmyk && cinfo.saw_Adobe_marker;
  // No jpeg_finish_decompress: what follows the last scanline (a missing EOI) changes no pixel.
  jpeg_destroy_decompress(&cinfo);
  if (cmyk) {
    const size_t n = static_cast<size_t>(out->width * out->height);
    unsigned char* p = out->pixels.get();
    for (size_t i = 0; i < n; ++i) {
      int c[4];
      for (int k = 0; k < 4; ++k) c[k] = inverted ? p[4 * i + k] : 255 - p[4 * i + k];
      for (int k = 0; k < 3; ++k)
        p[3 * i + k] = static_cast<unsigned char>((c[k] * c[3] + 127) / 255);
    }
  }
  return true;
}

Result<Decoded> decodeJpeg(const std::string& path, const std::string& bytes, bool headerOnly) {
  JpegError err;
  Decoded out;
  if (decodeJpegRaw(reinterpret_cast<const unsigned char*>(bytes.data()),
                    static_cast<unsigned long>(bytes.size()), headerOnly, &err, &out))
    return out;
  if (err.truncated)
    return Status::error(path + ": truncated after " + std::to_string(bytes.size()) +
                         " bytes (the JPEG data ends before the image does); " + kResave);
  if (std::strcmp(err.message, "too large") == 0)
    return tooLarge(path, out.width, out.height, out.channels);
  return Status::error(path + ": corrupt JPEG: " + err.message + "; " + kResave);
}

// ---- Decoding, channels, resizing -------------------------------------------------------------

// A PNG or JPEG held in memory; `what` (its path) names it in errors.
Result<Decoded> decodeBytes(const std::string& what, const std::string& bytes, bool headerOnly) {
  auto format = sniff(what, bytes);
  if (!format) return format.status();
  if (*format == Format::kPng) return headerOnly ? pngHeader(what, bytes) : decodePng(what, bytes);
  return decodeJpeg(what, bytes, headerOnly);
}

Result<Decoded> decodeFile(const std::string& path, bool headerOnly) {
  auto bytes = readFileBytes(path);
  if (!bytes) return bytes.status();
  return decodeBytes(path, *bytes, headerOnly);
}

Status checkOptions(const ImageFolderOptions& o) {
  if (o.channels != 0 && o.channels != 1 && o.channels != 3)
    return Status::error(
        "image channels must be 1 (grey) or 3 (RGB), or 0 for the first "
        "image's; got " +
        std::to_string(o.channels));
  if (o.height < 0 || o.width < 0 || (o.height == 0) != (o.width == 0))
    return Status::error("image resize " + std::to_string(o.height) + "x" +
                         std::to_string(o.width) +
                         " (height x width): set both to positive sizes, or both to 0 to keep "
                         "the images' own size");
  return Status();
}

// RGB -> grey: ITU-R BT.601 luma in PIL's 16-bit fixed point (its convert("L")), so data
// prepared in Python matches to the last bit ((299 R + 587 G + 114 B + 500) / 1000 differs on
// about one pixel in 4000).
unsigned char luma(const unsigned char* rgb) {
  return static_cast<unsigned char>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >>
                                    16);
}

// Interleaved H x W x c -> planar C x H x W (or, `interleaved`, H x W x C) with C = `channels`.
void convertPixels(const Decoded& d, int64_t channels, unsigned char* dst, bool interleaved) {
  const int64_t n = d.height * d.width;
  const unsigned char* s = d.pixels.get();
  auto at = [&](int64_t c, int64_t i) { return interleaved ? i * channels + c : c * n + i; };
  if (d.channels == channels) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < channels; ++c) dst[at(c, i)] = s[i * channels + c];
  } else if (d.channels == 1) {  // grey -> RGB
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < 3; ++c) dst[at(c, i)] = s[i];
  } else {  // RGB -> grey
    for (int64_t i = 0; i < n; ++i) dst[at(0, i)] = luma(s + 3 * i);
  }
}

// For each output index, the source indices and weights that make it.
struct AxisTaps {
  std::vector<int64_t> offset;  // taps of output j: [offset[j], offset[j + 1])
  std::vector<int64_t> index;
  std::vector<float> weight;
};

AxisTaps axisTaps(int64_t in, int64_t out) {
  AxisTaps t;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  t.offset.push_back(0);
  for (int64_t j = 0; j < out; ++j) {
    if (scale > 2.0) {
      // Area: output j is the mean of the source interval [j * scale, (j + 1) * scale), partial
      // pixels weighted by how much of them it covers. Bilinear would read only 2 of every
      // `scale` pixels there and alias.
      const double lo = j * scale, hi = (j + 1) * scale;
      const auto first = static_cast<int64_t>(std::floor(lo));
      const auto last = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(hi)));
      for (int64_t i = first; i < last; ++i) {
        const double cover = std::min<double>(hi, i + 1) - std::max<double>(lo, i);
        if (cover <= 0) continue;
        t.index.push_back(i);
        t.weight.push_back(static_cast<float>(cover / scale));
      }
    } else {
      // Bilinear with half-pixel centres: output centre j + 0.5 maps to source (j + 0.5) * scale,
      // i.e. source index (j + 0.5) * scale - 0.5; past the first or last centre the edge pixel.
      const double x = std::clamp((j + 0.5) * scale - 0.5, 0.0, static_cast<double>(in - 1));
      const auto i0 = static_cast<int64_t>(std::floor(x));
      const double f = x - static_cast<double>(i0);
      t.index.push_back(i0);
      t.weight.push_back(static_cast<float>(1.0 - f));
      if (f > 0 && i0 + 1 < in) {
        t.index.push_back(i0 + 1);
        t.weight.push_back(static_cast<float>(f));
      }
    }
    t.offset.push_back(static_cast<int64_t>(t.index.size()));
  }
  return t;
}

void resizePlanar(const unsigned char* src, int64_t channels, int64_t inH, int64_t inW,
                  unsigned char* dst, int64_t outH, int64_t outW) {
  const AxisTaps tx = axisTaps(inW, outW), ty = axisTaps(inH, outH);
  std::vector<float> rows(static_cast<size_t>(inH * outW));
  for (int64_t c = 0; c < channels; ++c) {
    const unsigned char* s = src + c * inH * inW;
    for (int64_t y = 0; y < inH; ++y)
      for (int64_t x = 0; x < outW; ++x) {
        float v = 0;
        for (int64_t k = tx.offset[x]; k < tx.offset[x + 1]; ++k)
          v += tx.weight[k] * static_cast<float>(s[y * inW + tx.index[k]]);
        rows[y * outW + x] = v;
      }
    unsigned char* d = dst + c * outH * outW;
    for (int64_t y = 0; y < outH; ++y)
      for (int64_t x = 0; x < outW; ++x) {
        float v = 0;
        for (int64_t k = ty.offset[y]; k < ty.offset[y + 1]; ++k)
          v += ty.weight[k] * rows[ty.index[k] * outW + x];
        d[y * outW + x] = static_cast<unsigned char>(std::clamp(std::floor(v + 0.5f), 0.f, 255.f));
      }
  }
}

// Decodes `path` into dst as uint8 [channels, outH, outW], resizing when the sizes differ.
Status decodeInto(const std::string& path, int64_t channels, int64_t outH, int64_t outW,
                  unsigned char* dst) {
  auto d = decodeFile(path, false);
  if (!d) return d.status();
  if (d->height == outH && d->width == outW) {
    convertPixels(*d, channels, dst, false);
    return Status();
  }
  std::vector<unsigned char> planar(static_cast<size_t>(channels * d->height * d->width));
  convertPixels(*d, channels, planar.data(), false);
  resizePlanar(planar.data(), channels, d->height, d->width, dst, outH, outW);
  return Status();
}

}  // namespace

Tensor resizeImage(const Tensor& chw, int64_t outH, int64_t outW) {
  const int64_t c = chw.dim(0), h = chw.dim(1), w = chw.dim(2);
  Tensor out(DType::kUInt8, {c, outH, outW});
  resizePlanar(chw.data<uint8_t>(), c, h, w, out.data<uint8_t>(), outH, outW);
  return out;
}

Result<Tensor> decodeImageBytes(const std::string& bytes, const std::string& what,
                                int64_t channels) {
  if (channels != 0 && channels != 1 && channels != 3)
    return Status::error("image channels must be 1 (grey), 3 (RGB) or 0 (the image's own)");
  auto d = decodeBytes(what, bytes, false);
  if (!d) return d.status();
  const int64_t c = channels ? channels : d->channels;
  Tensor hwc(DType::kUInt8, {d->height, d->width, c});
  convertPixels(*d, c, hwc.data<uint8_t>(), true);
  return hwc;
}

Result<Tensor> readImage(const std::string& path, const ImageFolderOptions& o) {
  DW_RETURN_IF_ERROR(checkOptions(o));
  auto d = decodeFile(path, false);
  if (!d) return d.status();
  const int64_t c = o.channels ? o.channels : d->channels;
  Tensor planar(DType::kUInt8, {c, d->height, d->width});
  convertPixels(*d, c, planar.data<uint8_t>(), false);
  if (o.height == 0 || (o.height == d->height && o.width == d->width)) return planar;
  return resizeImage(planar, o.height, o.width);
}

Result<ImageFolderInfo> inspectImageFolder(const std::string& dir) {
  auto listing = listFolder(dir);
  if (!listing) return listing.status();
  ImageFolderInfo info;
  info.classes = listing->classes;
  for (const auto& files : listing->files) {
    info.countPerClass.push_back(static_cast<int64_t>(files.size()));
    for (const auto& f : files)
      if (info.firstFiles.size() < 16) info.firstFiles.push_back(f);
  }
  info.samples = listing->samples();
  auto first = decodeFile(listing->files[0][0], true);
  if (!first) return first.status();
  info.firstHeight = first->height;
  info.firstWidth = first->width;
  info.firstChannels = first->channels;
  // Sizes that differ were found only when the whole folder was read, at the first batch (a
  // trial's folder of 50x50 and 40x30 images showed as fitting).
  std::vector<const std::string*> all;
  for (const auto& files : listing->files)
    for (const auto& f : files) all.push_back(&f);
  const size_t step = std::max<size_t>(1, all.size() / 2000);
  for (size_t i = 0; i < all.size() && info.otherSize.empty(); i += step) {
    auto d = decodeFile(*all[i], true);
    if (d && (d->height != first->height || d->width != first->width))
      info.otherSize = *all[i] + " is " + std::to_string(d->width) + "x" +
                       std::to_string(d->height) + ", " + listing->files[0][0] + " " +
                       std::to_string(first->width) + "x" + std::to_string(first->height);
  }
  return info;
}

Result<ImageFolderData> readImageFolder(const std::string& dir, const ImageFolderOptions& o,
                                        int64_t maxSamples) {
  DW_RETURN_IF_ERROR(checkOptions(o));
  if (maxSamples < 0)
    return Status::error(dir + ": maxSamples " + std::to_string(maxSamples) +
                         " is negative; use 0 for every image");
  auto listing = listFolder(dir);
  if (!listing) return listing.status();
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  for (size_t c = 0; c < listing->files.size(); ++c)
    for (const auto& f : listing->files[c]) {
      files.push_back(f);
      labels.push_back(static_cast<int64_t>(c));
    }
  if (maxSamples > 0 && maxSamples < static_cast<int64_t>(files.size())) {
    files.resize(static_cast<size_t>(maxSamples));
    labels.resize(static_cast<size_t>(maxSamples));
  }
  const auto n = static_cast<int64_t>(files.size());
  auto first = decodeFile(files[0], true);
  if (!first) return first.status();
  const int64_t c = o.channels ? o.channels : first->channels;
  const bool resize = o.height > 0;
  const int64_t h = resize ? o.height : first->height, w = resize ? o.width : first->width;
  // Divided, not multiplied: a corrupt header's size (up to 2^32 a side) overflows a product.
  const bool fits = c > 0 && h > 0 && w > 0 && h <= kMaxImageBytes / w / c;
  if (!fits || n > kMaxImageBytes * 64 / (c * h * w))
    return Status::error(dir + ": " + std::to_string(n) + " images of " + std::to_string(c) + "x" +
                         std::to_string(h) + "x" + std::to_string(w) +
                         " are too many bytes to hold in memory; read fewer (maxSamples) or "
                         "resize them smaller");

  ImageFolderData out;
  out.classes = listing->classes;
  out.images = Tensor(DType::kUInt8, {n, c, h, w});
  out.labels = Tensor::fromVector<int64_t>(labels, {n});
  unsigned char* base = out.images.data<uint8_t>();
  const int64_t sampleBytes = c * h * w;

  // Workers take samples in index order; after a failure they take no new ones. Every sample
  // before a failed one was taken earlier and finishes, so the first failure in sample order is
  // always found and reported, whatever the thread timing.
  std::vector<std::optional<Status>> errors(static_cast<size_t>(n));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&]() {
    for (;;) {
      if (failed.load()) return;
      const int64_t i = next.fetch_add(1);
      if (i >= n) return;
      Status st;
      try {
        if (!resize) {
          auto d = decodeFile(files[i], false);
          if (!d) {
            st = d.status();
          } else if (d->height != h || d->width != w) {
            st = Status::error(files[i] + ": the image is " + sizeText(d->width, d->height) +
                               " (width x height) but the first image, " + files[0] + ", is " +
                               sizeText(w, h) +
                               "; images of different sizes need a resize: set height and "
                               "width");
          } else {
            convertPixels(*d, c, base + i * sampleBytes, false);
          }
        } else {
          st = decodeInto(files[i], c, h, w, base + i * sampleBytes);
        }
      } catch (const std::exception& e) {
        st = Status::error(files[i] + ": " + e.what());
      }
      if (!st.ok()) {
        errors[i] = st;
        failed.store(true);
      }
    }
  };
  const int64_t threads =
      std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1, 16);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < std::min(threads, n); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) return *e;
  return out;
}

}  // namespace dw::engine::training
