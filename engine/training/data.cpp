// Dataset readers and the background batch loader.
#include "engine/training/data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graphs/file_io.h"

namespace dw::engine::training {

namespace {

constexpr const char* kCopyAgain = "copy or download the file again";

// A folder opens as a stream on Linux and reads as empty, which would be reported as a
// truncated file.
Status notAFolder(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::error(path +
                         ": is a folder; give a data file (an image folder is read as "
                         "images, not as IDX, NPY or CSV)");
  return regularFile(path);  // nor a device or a pipe: /dev/zero was read until memory ran out
}

Result<std::string> readFileBytes(const std::string& path) {
  DW_RETURN_IF_ERROR(notAFolder(path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error(path + ": cannot open file (check that it exists and is readable)");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::error(path + ": read error");
  return ss.str();
}

// The first `n` bytes (fewer if the file is shorter), and the file's size, for header-only reads.
Result<std::string> readFilePrefix(const std::string& path, size_t n, uint64_t* fileSize) {
  DW_RETURN_IF_ERROR(notAFolder(path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error(path + ": cannot open file (check that it exists and is readable)");
  f.seekg(0, std::ios::end);
  *fileSize = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  std::string s(static_cast<size_t>(std::min<uint64_t>(n, *fileSize)), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  if (!f) return Status::error(path + ": read error");
  return s;
}

bool isGzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Inflates a gzip stream, all of it or (`limit` > 0) only until `limit` bytes are out. A corrupt
// or truncated stream names the compressed byte offset. `more` supplies compressed input in
// pieces (returns false at the file's end), so a header read inflates only its first block.
template <typename More>
Result<std::string> gunzipFrom(More&& more, const std::string& path, size_t limit) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return Status::error(path + ": zlib init failed");
  std::string in, out;
  std::vector<char> chunk(limit ? std::max<size_t>(limit, 64) : (1 << 20));
  bool eof = false;
  int rc = Z_OK;
  while (rc != Z_STREAM_END && !(limit && out.size() >= limit)) {
    if (zs.avail_in == 0 && !eof) {
      eof = !more(in);
      zs.next_in = reinterpret_cast<Bytef*>(in.data());
      zs.avail_in = static_cast<uInt>(in.size());
    }
    zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - zs.avail_out);
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_in == 0 && !eof)) {
      const std::string msg = zs.msg ? zs.msg : "corrupt data";
      const auto at = zs.total_in;
      inflateEnd(&zs);
      if (rc == Z_BUF_ERROR)
        return Status::error(path + ": gzip stream is truncated at compressed byte " +
                             std::to_string(at) + " (the file ends before the stream does); " +
                             kCopyAgain);
      return Status::error(path + ": gzip data is corrupt at compressed byte " +
                           std::to_string(at) + " (" + msg + "); " + kCopyAgain);
    }
    if (eof && zs.avail_in == 0 && zs.avail_out != 0) {
      const auto at = zs.total_in;
      inflateEnd(&zs);
      return Status::error(path + ": gzip stream is truncated at compressed byte " +
                           std::to_string(at) + " (the file ends before the stream does); " +
                           kCopyAgain);
    }
  }
  inflateEnd(&zs);
  return out;
}

Result<std::string> gunzip(std::string in, const std::string& path) {
  return gunzipFrom(
      [&](std::string& buf) {
        buf = std::move(in);
        return false;  // everything at once: the end of the input
      },
      path, 0);
}

uint32_t readBe32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// ---- IDX --------------------------------------------------------------------------------------

struct IdxLayout {
  DType dtype = DType::kUndefined;
  Shape shape;
  size_t headerEnd = 0;
  std::optional<uint64_t> dataBytes;
};

// Parses the magic and dims from the first bytes of the (decompressed) file. `where` says which
// byte positions are meant for a gzip file.
Result<IdxLayout> parseIdxHeader(const std::string& bytes, const std::string& path,
                                 const std::string& where) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4)
    return Status::error(path + ": truncated: the IDX header needs 4 bytes of magic, the file" +
                         where + " holds " + std::to_string(bytes.size()) + "; " + kCopyAgain);
  if (p[0] != 0 || p[1] != 0)
    return Status::error(path + ": not an IDX file: its magic at byte 0" + where + " is " +
                         hexBytes(bytes, 4) +
                         ", where an IDX file starts with 00 00, a type code and the rank "
                         "(00 00 08 03 for MNIST images); check that this is an IDX images or "
                         "labels file, plain or gzip");
  IdxLayout l;
  switch (p[2]) {
    case 0x08:
      l.dtype = DType::kUInt8;
      break;
    case 0x09:
      l.dtype = DType::kInt8;
      break;
    case 0x0B:
      l.dtype = DType::kInt16;
      break;
    case 0x0C:
      l.dtype = DType::kInt32;
      break;
    case 0x0D:
      l.dtype = DType::kFloat;
      break;
    case 0x0E:
      l.dtype = DType::kDouble;
      break;
    default:
      return Status::error(path + ": IDX type code " + hexBytes(bytes.substr(2), 1) + " at byte 2" +
                           where +
                           " is not one of 08 (uint8) 09 (int8) 0B (int16) 0C (int32) 0D "
                           "(float32) 0E (float64); the file is corrupt or not IDX: " +
                           kCopyAgain);
  }
  const int rank = p[3];
  l.headerEnd = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < l.headerEnd)
    return Status::error(path + ": truncated: the IDX header of rank " + std::to_string(rank) +
                         " needs " + std::to_string(l.headerEnd) + " bytes, the file" + where +
                         " holds " + std::to_string(bytes.size()) + "; " + kCopyAgain);
  for (int i = 0; i < rank; ++i) l.shape.push_back(readBe32(p + 4 + 4 * i));
  l.dataBytes = payloadBytes(l.shape, dtypeSize(l.dtype));
  return l;
}

// Whether `total` bytes (of the decompressed file) are exactly what the header promises.
Status checkIdxSize(const IdxLayout& l, uint64_t total, const std::string& path,
                    const std::string& where) {
  const uint64_t available = total - l.headerEnd;
  if (!l.dataBytes || available < *l.dataBytes)
    return truncatedData(path, l.shape, l.dtype, l.headerEnd, available, l.dataBytes, where,
                         kCopyAgain);
  if (available > *l.dataBytes)
    return Status::error(path + ": " + std::to_string(available - *l.dataBytes) +
                         " extra bytes after byte " + std::to_string(l.headerEnd + *l.dataBytes) +
                         where + ": the header's shape " + shapeToString(l.shape) + " of " +
                         dtypeName(l.dtype) + " accounts for " +
                         std::to_string(l.headerEnd + *l.dataBytes) +
                         " bytes; the header or the data is wrong: " + kCopyAgain);
  return Status();
}

constexpr const char* kDecompressed = " of the decompressed data";

}  // namespace

Result<Tensor> readIdx(const std::string& path) {
  auto raw = readFileBytes(path);
  if (!raw) return raw.status();
  std::string bytes = std::move(raw.value());
  std::string where;
  if (isGzip(bytes)) {
    auto inflated = gunzip(std::move(bytes), path);
    if (!inflated) return inflated.status();
    bytes = std::move(inflated.value());
    where = kDecompressed;
  }
  auto l = parseIdxHeader(bytes, path, where);
  if (!l) return l.status();
  DW_RETURN_IF_ERROR(checkIdxSize(*l, bytes.size(), path, where));
  Tensor t(l->dtype, l->shape);
  if (*l->dataBytes) std::memcpy(t.raw(), bytes.data() + l->headerEnd, *l->dataBytes);
  if (dtypeSize(l->dtype) > 1 && hostLittleEndian())
    byteSwapInPlace(t.raw(), static_cast<size_t>(t.size()), dtypeSize(l->dtype));
  return t;
}

Result<SourceHeader> readIdxHeader(const std::string& path) {
  // The largest IDX header: magic and 255 dims.
  constexpr size_t kMaxHeader = 4 + 4 * 255;
  uint64_t fileSize = 0;
  auto start = readFilePrefix(path, kMaxHeader, &fileSize);
  if (!start) return start.status();
  std::string bytes = std::move(start.value());
  const bool gz = isGzip(bytes);
  if (gz) {
    // Inflate only until the header is out: the file is read 16 KiB at a time, as needed.
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::error(path + ": cannot open file");
    auto more = [&](std::string& buf) {
      buf.resize(1 << 14);
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      buf.resize(static_cast<size_t>(f.gcount()));
      return f.good() && f.peek() != std::char_traits<char>::eof();
    };
    auto inflated = gunzipFrom(more, path, kMaxHeader);
    if (!inflated) return inflated.status();
    bytes = std::move(inflated.value());
  }
  auto l = parseIdxHeader(bytes, path, gz ? kDecompressed : "");
  if (!l) return l.status();
  // A plain file's size is known without reading it, so a truncated one fails here already; a
  // gzip file's is not (readIdx checks it).
  if (!gz) DW_RETURN_IF_ERROR(checkIdxSize(*l, fileSize, path, ""));
  SourceHeader h;
  h.format = "idx";
  h.shape = l->shape;
  h.dtype = l->dtype;
  return h;
}

// ---- NPY (parsed by engine/io.cpp) --------------------------------------------------------

Result<SourceHeader> readNpyHeader(const std::string& path) {
  uint64_t fileSize = 0;
  auto pre = readFilePrefix(path, 12, &fileSize);
  if (!pre) return pre.status();
  size_t want = 12;
  if (pre->size() >= 10 && pre->compare(0, 6, "\x93NUMPY") == 0) {
    const std::string& b = *pre;
    if (b[6] == 1)
      want = 10 + (static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8));
    else if (b.size() >= 12)
      for (int i = 0; i < 4; ++i) want += size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
  }
  // A header longer than the file is reported as truncated by the parser; reading just what is
  // there keeps a corrupt length from allocating gigabytes.
  auto head =
      readFilePrefix(path, static_cast<size_t>(std::min<uint64_t>(want, fileSize)), &fileSize);
  if (!head) return head.status();
  auto l = parseNpyHeader(*head, fileSize, path);
  if (!l) return l.status();
  SourceHeader h;
  h.format = "npy";
  h.shape = l->shape;
  h.dtype = l->dtype;
  return h;
}

// ---- CSV ----------------------------------------------------------------------------------

bool splitCsvLine(const std::string& line, char delim, std::vector<std::string>& out) {
  out.clear();
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == delim) {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  for (auto& s : out) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t");
    s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  return !quoted;
}

namespace {

bool parseNumber(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool blankLine(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Reads lines, skipping blank ones, numbering every line as an editor does.
class CsvLines {
 public:
  explicit CsvLines(const std::string& path) : f_(path) {}
  bool opened() const { return static_cast<bool>(f_); }
  bool next(std::string& line) {
    while (std::getline(f_, line)) {
      ++lineNo_;
      // A UTF-8 byte order mark (spreadsheets write one) is not part of the first name.
      if (lineNo_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
      if (!blankLine(line)) return true;
    }
    return false;
  }
  int64_t lineNo() const { return lineNo_; }

 private:
  std::ifstream f_;
  int64_t lineNo_ = 0;
};

Status unclosedQuote(const std::string& path, int64_t line) {
  return Status::error(path + " line " + std::to_string(line) +
                       ": a quoted field is not closed on this line (fields spanning lines are "
                       "not supported); close the quote or remove the line break inside it");
}

}  // namespace

bool csvLineIsHeader(const std::vector<std::string>& cells) {
  double v;
  bool numbers = true, counting = true;
  for (size_t i = 0; i < cells.size(); ++i) {
    numbers = numbers && parseNumber(cells[i], v);
    counting = counting && numbers && v == static_cast<double>(i);
  }
  return !numbers || counting;
}

namespace {

// The column names: the header line's, or "0", "1", ... from the first row's field count.
Result<std::vector<std::string>> csvColumnNames(CsvLines& lines, const std::string& path,
                                                const CsvOptions& options,
                                                std::vector<std::string>& firstRow) {
  std::string line;
  if (!lines.next(line))
    return Status::error(path +
                         ": the file is empty: a CSV needs a header line (or, without one, a "
                         "first row) and data rows");
  std::vector<std::string> cells;
  if (!splitCsvLine(line, options.delimiter, cells)) return unclosedQuote(path, lines.lineNo());
  std::vector<std::string> names;
  if (options.header && csvLineIsHeader(cells)) {
    names = cells;
  } else {
    for (size_t i = 0; i < cells.size(); ++i) names.push_back(std::to_string(i));
    firstRow = cells;
  }
  return names;
}

}  // namespace

Result<CsvData> readCsv(const std::string& path, const CsvOptions& options) {
  DW_RETURN_IF_ERROR(notAFolder(path));
  CsvLines lines(path);
  if (!lines.opened())
    return Status::error(path + ": cannot open file (check that it exists and is readable)");
  std::vector<std::string> firstRow;
  auto namesOr = csvColumnNames(lines, path, options, firstRow);
  if (!namesOr) return namesOr.status();
  const std::vector<std::string> names = std::move(namesOr.value());
  const size_t columns = names.size();
  const int64_t headerLine = lines.lineNo();

  // Columns are resolved before any row is parsed, so a misnamed column fails at once, and only
  // the columns in use must hold numbers (a text column left out of the features is fine).
  std::string nameList;
  for (size_t i = 0; i < columns && i < 12; ++i) nameList += (i ? ", " : "") + names[i];
  if (columns > 12) nameList += ", ...";
  auto findColumn = [&](const std::string& key) -> int64_t {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == key) return static_cast<int64_t>(i);
    double v;
    if (parseNumber(key, v) && v >= 0 && v < static_cast<double>(columns) && v == std::floor(v))
      return static_cast<int64_t>(v);
    return -1;
  };
  auto noColumn = [&](const std::string& what, const std::string& key) {
    return Status::error(path + ": " + what + " column '" + key + "' is neither a column name (" +
                         nameList + ") nor an index below " + std::to_string(columns));
  };
  int64_t label = -1;
  if (!options.labelColumn.empty()) {
    label = findColumn(options.labelColumn);
    if (label < 0) return noColumn("label", options.labelColumn);
  }
  std::vector<int64_t> feats;
  if (options.featureColumns.empty()) {
    for (size_t i = 0; i < columns; ++i)
      if (static_cast<int64_t>(i) != label) feats.push_back(static_cast<int64_t>(i));
  } else {
    for (const auto& c : options.featureColumns) {
      const int64_t i = findColumn(c);
      if (i < 0) return noColumn("feature", c);
      feats.push_back(i);
    }
  }
  const bool asStored = options.labelType == DType::kUndefined;
  const bool integralLabel = !asStored && !isFloating(options.labelType);
  bool wholeLabels = true;

  std::vector<float> features;
  std::vector<double> labels;
  int64_t rows = 0;
  std::vector<std::string> cells;
  std::string line;
  auto takeRow = [&](const std::vector<std::string>& row, int64_t lineNo) -> Status {
    if (row.size() != columns)
      return Status::error(path + " line " + std::to_string(lineNo) + ": " +
                           std::to_string(row.size()) + " fields, the " +
                           (firstRow.empty() ? "header" : "first line") + " has " +
                           std::to_string(columns) +
                           "; every row needs one value per column: fix the row or its "
                           "delimiters");
    auto cell = [&](int64_t i, double& v) -> Status {
      if (parseNumber(row[i], v)) return Status();
      const std::string where = path + " line " + std::to_string(lineNo) + ", column " +
                                std::to_string(i + 1) + " ('" + names[i] + "')";
      if (row[i].empty())
        return Status::error(where +
                             " is empty; fill it in, or leave the column out of the "
                             "features");
      return Status::error(where + ": '" + row[i] +
                           "' is not a number; fix the cell, or leave the column out of the "
                           "features");
    };
    double v = 0;
    for (int64_t i : feats) {
      DW_RETURN_IF_ERROR(cell(i, v));
      features.push_back(static_cast<float>(v));
    }
    if (label >= 0) {
      DW_RETURN_IF_ERROR(cell(label, v));
      if (integralLabel && v != std::floor(v))
        return Status::error(path + " line " + std::to_string(lineNo) + ", column " +
                             std::to_string(label + 1) + " ('" + names[label] + "'): label '" +
                             row[label] + "' is not a whole number, as a " +
                             dtypeName(options.labelType) +
                             " class index must be; fix it, or give the input a float type to "
                             "learn the values themselves");
      wholeLabels = wholeLabels && v == std::floor(v);
      labels.push_back(v);
    }
    ++rows;
    return Status();
  };
  if (!firstRow.empty()) DW_RETURN_IF_ERROR(takeRow(firstRow, headerLine));
  while ((options.maxRows <= 0 || rows < options.maxRows) && lines.next(line)) {
    if (!splitCsvLine(line, options.delimiter, cells)) return unclosedQuote(path, lines.lineNo());
    DW_RETURN_IF_ERROR(takeRow(cells, lines.lineNo()));
  }
  if (rows == 0)
    return Status::error(path + ": the header names " + std::to_string(columns) +
                         " columns but no data rows follow it; add rows (one sample per line)");

  CsvData out;
  out.columns = names;
  const auto nf = static_cast<int64_t>(feats.size());
  out.features = Tensor(DType::kFloat, {rows, nf});
  if (!features.empty())
    std::memcpy(out.features.data<float>(), features.data(), features.size() * sizeof(float));
  for (auto i : feats) out.featureNames.push_back(names[i]);
  if (label >= 0) {
    Tensor lab(DType::kDouble, {rows});
    std::memcpy(lab.data<double>(), labels.data(), labels.size() * sizeof(double));
    auto cast = lab.cast(!asStored     ? options.labelType
                         : wholeLabels ? DType::kInt64
                                       : DType::kFloat);
    if (!cast) return cast.status().withContext(path);
    out.labels = std::move(cast.value());
  }
  return out;
}

Result<SourceHeader> readCsvHeader(const std::string& path, const CsvOptions& options) {
  DW_RETURN_IF_ERROR(notAFolder(path));
  CsvLines lines(path);
  if (!lines.opened())
    return Status::error(path + ": cannot open file (check that it exists and is readable)");
  std::vector<std::string> firstRow;
  auto names = csvColumnNames(lines, path, options, firstRow);
  if (!names) return names.status();
  // Counting rows reads the file but parses nothing: no number conversion, no allocation per row.
  int64_t rows = firstRow.empty() ? 0 : 1;
  std::string line;
  while (lines.next(line)) ++rows;
  SourceHeader h;
  h.format = "csv";
  h.shape = {rows, static_cast<int64_t>(names->size())};
  h.dtype = DType::kFloat;
  h.csvColumns = std::move(names.value());
  return h;
}

// ---- Normalization, datasets --------------------------------------------------------------

Result<Tensor> normalize(const Tensor& src, const Normalization& n) {
  if (n.std == 0) return Status::error("normalization std must not be 0");
  Tensor f;
  if (src.dtype() == DType::kFloat) {
    f = n.isIdentity() ? src : src.clone();
  } else {
    auto c = src.cast(DType::kFloat);
    if (!c) return c.status();
    f = std::move(c.value());
  }
  if (n.isIdentity()) return f;
  const float scale = static_cast<float>(n.scale), mean = static_cast<float>(n.mean);
  const float inv = static_cast<float>(1.0 / n.std);
  float* p = f.data<float>();
  const int64_t count = f.size();
  for (int64_t i = 0; i < count; ++i) p[i] = (p[i] * scale - mean) * inv;
  return f;
}

int64_t Dataset::size() const {
  return columns.empty() ? 0 : columns.begin()->second.dim(0);
}

Status Dataset::validate() const {
  int64_t n = -1;
  std::string first;
  for (const auto& [name, t] : columns) {
    if (t.rank() == 0)
      return Status::error("dataset column '" + name +
                           "' is a scalar; it needs a sample dimension");
    if (n < 0) {
      n = t.dim(0);
      first = name;
    } else if (t.dim(0) != n) {
      return Status::error("dataset column '" + name + "' has " + std::to_string(t.dim(0)) +
                           " samples but '" + first + "' has " + std::to_string(n));
    }
  }
  return Status();
}

namespace {
// `storage`, when large enough, is reused instead of allocating (its contents are overwritten).
Tensor gatherRows(const Tensor& t, const int64_t* idx, int64_t count,
                  std::shared_ptr<Buffer> storage = nullptr) {
  Shape s = t.shape();
  s[0] = count;
  Tensor out(t.dtype(), s, std::move(storage));
  const size_t row = t.size() ? t.bytes() / static_cast<size_t>(t.dim(0)) : 0;
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * row, src + idx[i] * row, row);
  return out;
}
}  // namespace

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  std::vector<int64_t> idx;
  for (int64_t i = begin; i < end; ++i) idx.push_back(i);
  return gather(idx);
}

Dataset Dataset::gather(const std::vector<int64_t>& indices) const {
  Dataset d;
  for (const auto& [name, t] : columns)
    d.columns[name] = gatherRows(t, indices.data(), static_cast<int64_t>(indices.size()));
  d.origin.reserve(indices.size());
  for (int64_t i : indices) d.origin.push_back(originOf(i));
  return d;
}

std::vector<int64_t> shuffledIndices(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  uint64_t state =
      seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 0x632BE59BD9B4E019ull;
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift keeps the draw unbiased enough for shuffling and identical everywhere.
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(idx[i], idx[j]);
  }
  return idx;
}

// ---- BatchLoader --------------------------------------------------------------------------

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> data, LoaderOptions options)
    : data_(std::move(data)), options_(options) {
  if (options_.batchSize < 1) options_.batchSize = 1;
  if (options_.prefetch < 1) options_.prefetch = 1;
}

BatchLoader::~BatchLoader() {
  stopWorker();
}

int64_t BatchLoader::batchesPerEpoch() const {
  const int64_t n = data_->size(), b = options_.batchSize;
  return options_.dropLast ? n / b : (n + b - 1) / b;
}

void BatchLoader::stopWorker() {
  stop_ = true;
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  stop_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  ready_.clear();
  workerDone_ = true;
}

Batch BatchLoader::makeBatch(const std::vector<int64_t>& order, int64_t batchIndex) {
  const int64_t n = data_->size();
  const int64_t begin = batchIndex * options_.batchSize;
  const int64_t count = std::min(options_.batchSize, n - begin);
  Batch b;
  b.size = count;
  for (const auto& [name, t] : data_->columns) {
    const size_t bytes = t.size() ? t.bytes() / static_cast<size_t>(t.dim(0)) * count : 0;
    std::shared_ptr<Buffer> storage = reusable(bytes);
    if (!storage && options_.hostBuffers) storage = options_.hostBuffers(bytes);
    Tensor& out = b.inputs[name] = gatherRows(t, order.data() + begin, count, std::move(storage));
    if (out.buffer() &&
        std::find(recycled_.begin(), recycled_.end(), out.buffer()) == recycled_.end())
      recycled_.push_back(out.buffer());
  }
  // Enough for the batches in flight (queued, in the step, just released); older ones go.
  const size_t keep = (static_cast<size_t>(options_.prefetch) + 3) * data_->columns.size();
  if (recycled_.size() > keep)
    recycled_.erase(recycled_.begin(), recycled_.end() - static_cast<long>(keep));
  return b;
}

std::shared_ptr<Buffer> BatchLoader::reusable(size_t bytes) {
  for (auto& r : recycled_) {
    // Only we hold it: the step that used it has let go. The fence pairs with the release in
    // the consumer's reference drop, so its reads of the buffer happen before our writes.
    if (r.use_count() == 1 && r->capacity >= bytes && r->capacity <= bytes * 2 + 4096) {
      std::atomic_thread_fence(std::memory_order_acquire);
      return r;
    }
  }
  return nullptr;
}

void BatchLoader::work(int64_t epoch, int64_t firstBatch) {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = shuffledIndices(data_->size(), options_.seed, epoch);
  } else {
    order.resize(static_cast<size_t>(data_->size()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  }
  const int64_t total = batchesPerEpoch();
  for (int64_t bi = firstBatch; bi < total; ++bi) {
    Batch b = makeBatch(order, bi);
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < options_.prefetch; });
    if (stop_) return;
    ready_.push_back(std::move(b));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  workerDone_ = true;
  cv_.notify_all();
}

void BatchLoader::startEpoch(int64_t epoch, int64_t skipBatches) {
  stopWorker();
  workerDone_ = false;
  worker_ = std::thread([this, epoch, skipBatches] { work(epoch, skipBatches); });
}

std::optional<Batch> BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !ready_.empty() || workerDone_; });
  if (ready_.empty()) return std::nullopt;
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace dw::engine::training
