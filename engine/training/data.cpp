// Dataset readers and the background batch loader.
#include "engine/training/data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dw::engine::training {

namespace {

Result<std::string> readFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::error(path + ": cannot open file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool isGzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Inflates a whole gzip stream; a corrupt or truncated stream names the compressed byte offset.
Result<std::string> gunzip(const std::string& in, const std::string& path) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return Status::error(path + ": zlib init failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  std::vector<char> chunk(1 << 20);
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - zs.avail_out);
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK) {
      const std::string msg = zs.msg ? zs.msg : "corrupt data";
      const auto at = zs.total_in;
      inflateEnd(&zs);
      return Status::error(path + ": gzip data is corrupt at compressed byte " +
                           std::to_string(at) + " (" + msg + ")");
    }
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      const auto at = zs.total_in;
      inflateEnd(&zs);
      return Status::error(path + ": gzip stream is truncated at compressed byte " +
                           std::to_string(at) + " (the file ends before the stream does)");
    }
  }
  inflateEnd(&zs);
  return out;
}

uint32_t readBe32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool hostLittleEndian() {
  const uint16_t x = 1;
  return *reinterpret_cast<const uint8_t*>(&x) == 1;
}

void byteSwapInPlace(void* data, size_t count, size_t width) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i) std::reverse(p + i * width, p + (i + 1) * width);
}

}  // namespace

Result<Tensor> readIdx(const std::string& path) {
  auto raw = readFileBytes(path);
  if (!raw) return raw.status();
  std::string bytes = std::move(raw.value());
  if (isGzip(bytes)) {
    auto inflated = gunzip(bytes, path);
    if (!inflated) return inflated.status();
    bytes = std::move(inflated.value());
  }
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4)
    return Status::error(path + ": IDX header truncated at byte " + std::to_string(bytes.size()) +
                         " (need 4 bytes of magic)");
  if (p[0] != 0 || p[1] != 0)
    return Status::error(path +
                         ": not an IDX file: magic at byte 0 must start with two zero bytes");
  DType dt;
  switch (p[2]) {
    case 0x08:
      dt = DType::kUInt8;
      break;
    case 0x09:
      dt = DType::kInt8;
      break;
    case 0x0B:
      dt = DType::kInt16;
      break;
    case 0x0C:
      dt = DType::kInt32;
      break;
    case 0x0D:
      dt = DType::kFloat;
      break;
    case 0x0E:
      dt = DType::kDouble;
      break;
    default:
      return Status::error(path + ": IDX type code 0x" + std::to_string(p[2]) +
                           " at byte 2 is not one of 08 09 0B 0C 0D 0E");
  }
  const int rank = p[3];
  const size_t headerEnd = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < headerEnd)
    return Status::error(path + ": IDX header truncated at byte " + std::to_string(bytes.size()) +
                         " (rank " + std::to_string(rank) + " needs " + std::to_string(headerEnd) +
                         " header bytes)");
  Shape shape;
  for (int i = 0; i < rank; ++i) shape.push_back(readBe32(p + 4 + 4 * i));
  const size_t need = static_cast<size_t>(numElements(shape)) * dtypeSize(dt);
  if (bytes.size() - headerEnd < need)
    return Status::error(path + ": IDX data truncated at byte " + std::to_string(bytes.size()) +
                         " (shape " + shapeToString(shape) + " needs " +
                         std::to_string(headerEnd + need) + " bytes)");
  if (bytes.size() - headerEnd > need)
    return Status::error(path + ": IDX file has " +
                         std::to_string(bytes.size() - headerEnd - need) +
                         " extra bytes after byte " + std::to_string(headerEnd + need) +
                         " (the header's shape " + shapeToString(shape) + " does not match)");
  Tensor t(dt, shape);
  if (need) std::memcpy(t.raw(), p + headerEnd, need);
  if (dtypeSize(dt) > 1 && hostLittleEndian())
    byteSwapInPlace(t.raw(), static_cast<size_t>(t.size()), dtypeSize(dt));
  return t;
}

// ---- NPY ----------------------------------------------------------------------------------

namespace {

// Value of `key` in the NPY header dict (a Python literal), raw text up to the next top-level
// comma or closing brace.
std::optional<std::string> npyField(const std::string& header, const std::string& key) {
  const std::string k = "'" + key + "'";
  auto pos = header.find(k);
  if (pos == std::string::npos) return std::nullopt;
  pos = header.find(':', pos + k.size());
  if (pos == std::string::npos) return std::nullopt;
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return header.substr(pos, end - pos + (header[pos] == '(' ? 0 : 0));
}

}  // namespace

Result<Tensor> readNpy(const std::string& path) {
  auto raw = readFileBytes(path);
  if (!raw) return raw.status();
  const std::string& b = raw.value();
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    return Status::error(path + ": not an NPY file (magic \\x93NUMPY missing at byte 0)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12)
      return Status::error(path + ": NPY header truncated at byte " + std::to_string(b.size()));
    headerLen = 0;
    for (int i = 0; i < 4; ++i)
      headerLen |= size_t(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    headerStart = 12;
  } else {
    return Status::error(path + ": NPY version " + std::to_string(major) +
                         " at byte 6 is not supported (1, 2 or 3)");
  }
  if (b.size() < headerStart + headerLen)
    return Status::error(path + ": NPY header truncated at byte " + std::to_string(b.size()) +
                         " (header needs " + std::to_string(headerStart + headerLen) + " bytes)");
  const std::string header = b.substr(headerStart, headerLen);
  auto descr = npyField(header, "descr");
  auto fortran = npyField(header, "fortran_order");
  auto shapeText = npyField(header, "shape");
  if (!descr || !fortran || !shapeText)
    return Status::error(path + ": NPY header at byte " + std::to_string(headerStart) +
                         " lacks descr, fortran_order or shape: " + header);
  if (fortran->rfind("True", 0) == 0)
    return Status::error(path +
                         ": NPY array is in Fortran order; save it with "
                         "numpy.ascontiguousarray first");
  std::string d = *descr;
  d.erase(std::remove(d.begin(), d.end(), '\''), d.end());
  d.erase(std::remove(d.begin(), d.end(), '"'), d.end());
  if (d.size() < 3) return Status::error(path + ": NPY descr '" + d + "' is not understood");
  const char endian = d[0];
  const std::string code = d.substr(1);
  DType dt = DType::kUndefined;
  if (code == "f4")
    dt = DType::kFloat;
  else if (code == "f8")
    dt = DType::kDouble;
  else if (code == "f2")
    dt = DType::kFloat16;
  else if (code == "i1")
    dt = DType::kInt8;
  else if (code == "i2")
    dt = DType::kInt16;
  else if (code == "i4")
    dt = DType::kInt32;
  else if (code == "i8")
    dt = DType::kInt64;
  else if (code == "u1")
    dt = DType::kUInt8;
  else if (code == "u2")
    dt = DType::kUInt16;
  else if (code == "u4")
    dt = DType::kUInt32;
  else if (code == "u8")
    dt = DType::kUInt64;
  else if (code == "b1")
    dt = DType::kBool;
  if (dt == DType::kUndefined)
    return Status::error(path + ": NPY dtype '" + d + "' is not supported (numeric dtypes only)");
  Shape shape;
  {
    std::string s = *shapeText;
    for (char& c : s)
      if (c == '(' || c == ')' || c == ',') c = ' ';
    std::istringstream ss(s);
    int64_t v;
    while (ss >> v) shape.push_back(v);
  }
  const size_t dataStart = headerStart + headerLen;
  const size_t need = static_cast<size_t>(numElements(shape)) * dtypeSize(dt);
  if (b.size() - dataStart < need)
    return Status::error(path + ": NPY data truncated at byte " + std::to_string(b.size()) +
                         " (shape " + shapeToString(shape) + " needs " +
                         std::to_string(dataStart + need) + " bytes)");
  Tensor t(dt, shape);
  if (need) std::memcpy(t.raw(), b.data() + dataStart, need);
  const bool fileLittle = endian == '<' || endian == '|' || endian == '=';
  if (dtypeSize(dt) > 1 && fileLittle != hostLittleEndian())
    byteSwapInPlace(t.raw(), static_cast<size_t>(t.size()), dtypeSize(dt));
  return t;
}

Status writeNpy(const std::string& path, const Tensor& t) {
  std::string code;
  switch (t.dtype()) {
    case DType::kFloat:
      code = "<f4";
      break;
    case DType::kDouble:
      code = "<f8";
      break;
    case DType::kFloat16:
      code = "<f2";
      break;
    case DType::kInt8:
      code = "|i1";
      break;
    case DType::kInt16:
      code = "<i2";
      break;
    case DType::kInt32:
      code = "<i4";
      break;
    case DType::kInt64:
      code = "<i8";
      break;
    case DType::kUInt8:
      code = "|u1";
      break;
    case DType::kUInt16:
      code = "<u2";
      break;
    case DType::kUInt32:
      code = "<u4";
      break;
    case DType::kUInt64:
      code = "<u8";
      break;
    case DType::kBool:
      code = "|b1";
      break;
    default:
      return Status::error(path + ": cannot write dtype " + dtypeName(t.dtype()) + " as NPY");
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i)
    shape += std::to_string(t.dim(i)) + (t.rank() == 1 ? "," : (i + 1 < t.rank() ? ", " : ""));
  shape += ")";
  std::string header =
      "{'descr': '" + code + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return Status::error(path + ": cannot write file");
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char lenBytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(lenBytes, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  if (!f) return Status::error(path + ": write failed");
  return Status();
}

// ---- CSV ----------------------------------------------------------------------------------

namespace {

std::vector<std::string> splitCsvLine(const std::string& line, char delim) {
  std::vector<std::string> out;
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
  return out;
}

bool parseNumber(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

Result<CsvData> readCsv(const std::string& path, const CsvOptions& options) {
  std::ifstream f(path);
  if (!f) return Status::error(path + ": cannot open file");
  std::string line;
  int64_t lineNo = 0;
  std::vector<std::string> names;
  size_t columns = 0;
  std::vector<std::vector<double>> rows;
  while (std::getline(f, line)) {
    ++lineNo;
    if (line.empty() || line == "\r") continue;
    auto cells = splitCsvLine(line, options.delimiter);
    if (names.empty() && columns == 0) {
      columns = cells.size();
      if (options.header) {
        names = cells;
        continue;
      }
      for (size_t i = 0; i < columns; ++i) names.push_back(std::to_string(i));
    }
    if (cells.size() != columns)
      return Status::error(path + ":" + std::to_string(lineNo) + ": expected " +
                           std::to_string(columns) + " columns, found " +
                           std::to_string(cells.size()));
    std::vector<double> row(columns);
    for (size_t i = 0; i < columns; ++i) {
      if (!parseNumber(cells[i], row[i]))
        return Status::error(path + ":" + std::to_string(lineNo) + ": column '" + names[i] +
                             "' value '" + cells[i] + "' is not a number");
    }
    rows.push_back(std::move(row));
  }
  if (columns == 0) return Status::error(path + ":1: the CSV file is empty");
  auto findColumn = [&](const std::string& key) -> int64_t {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == key) return static_cast<int64_t>(i);
    double v;
    if (parseNumber(key, v) && v >= 0 && v < static_cast<double>(columns) && v == std::floor(v))
      return static_cast<int64_t>(v);
    return -1;
  };
  int64_t label = -1;
  if (!options.labelColumn.empty()) {
    label = findColumn(options.labelColumn);
    if (label < 0)
      return Status::error(path + ":1: label column '" + options.labelColumn +
                           "' is not a column name or index");
  }
  std::vector<int64_t> feats;
  if (options.featureColumns.empty()) {
    for (size_t i = 0; i < columns; ++i)
      if (static_cast<int64_t>(i) != label) feats.push_back(static_cast<int64_t>(i));
  } else {
    for (const auto& c : options.featureColumns) {
      const int64_t i = findColumn(c);
      if (i < 0) return Status::error(path + ":1: feature column '" + c + "' is not a column");
      feats.push_back(i);
    }
  }
  CsvData out;
  const auto n = static_cast<int64_t>(rows.size());
  out.features = Tensor(DType::kFloat, {n, static_cast<int64_t>(feats.size())});
  float* fp = out.features.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (size_t j = 0; j < feats.size(); ++j)
      fp[r * static_cast<int64_t>(feats.size()) + static_cast<int64_t>(j)] =
          static_cast<float>(rows[r][feats[j]]);
  for (auto i : feats) out.featureNames.push_back(names[i]);
  if (label >= 0) {
    Tensor lab(DType::kDouble, {n});
    for (int64_t r = 0; r < n; ++r) lab.data<double>()[r] = rows[r][label];
    auto cast = lab.cast(options.labelType);
    if (!cast) return cast.status().withContext(path);
    out.labels = std::move(cast.value());
  }
  return out;
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
    Tensor& out = b.inputs[name] = gatherRows(t, order.data() + begin, count, reusable(bytes));
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

// ---- Project dataset specs ----------------------------------------------------------------

Result<Dataset> loadDataset(const std::vector<DataFileSpec>& files, const std::string& baseDir) {
  Dataset d;
  for (const auto& spec : files) {
    std::filesystem::path p(spec.path);
    if (p.is_relative() && !baseDir.empty()) p = std::filesystem::path(baseDir) / p;
    const std::string path = p.string();
    std::string format = spec.format;
    if (format.empty()) {
      std::string name = p.filename().string();
      if (name.size() > 3 && name.substr(name.size() - 3) == ".gz")
        name = name.substr(0, name.size() - 3);
      if (name.find("idx") != std::string::npos || name.find("ubyte") != std::string::npos)
        format = "idx";
      else if (p.extension() == ".npy")
        format = "npy";
      else if (p.extension() == ".csv")
        format = "csv";
      else
        return Status::error(path +
                             ": cannot tell the format from the name; set \"format\" to "
                             "idx, npy or csv");
    }
    Tensor t;
    if (format == "idx") {
      auto r = readIdx(path);
      if (!r) return r.status();
      t = std::move(r.value());
    } else if (format == "npy") {
      auto r = readNpy(path);
      if (!r) return r.status();
      t = std::move(r.value());
    } else if (format == "csv") {
      CsvOptions o;
      o.header = spec.csvHeader;
      o.labelColumn = spec.csvLabelColumn;
      auto r = readCsv(path, o);
      if (!r) return r.status();
      if (spec.csvTakeLabel) {
        if (!r->labels) return Status::error(path + ": label requested but no label column set");
        t = *r->labels;
      } else {
        t = r->features;
      }
    } else {
      return Status::error(path + ": format '" + format +
                           "' is not supported; use idx, npy or csv");
    }
    if (!spec.normalization.isIdentity() || spec.dtype == "float" || spec.dtype == "float32") {
      auto r = normalize(t, spec.normalization);
      if (!r) return r.status().withContext(path);
      t = std::move(r.value());
    } else if (!spec.dtype.empty()) {
      DType to = DType::kUndefined;
      for (DType c : {DType::kFloat, DType::kDouble, DType::kInt32, DType::kInt64, DType::kUInt8,
                      DType::kInt8, DType::kBool, DType::kFloat16})
        if (spec.dtype == dtypeName(c)) to = c;
      if (spec.dtype == "int64") to = DType::kInt64;
      if (spec.dtype == "int32") to = DType::kInt32;
      if (spec.dtype == "double") to = DType::kDouble;
      if (to == DType::kUndefined)
        return Status::error(path + ": dtype '" + spec.dtype + "' is not supported");
      auto r = t.cast(to);
      if (!r) return r.status().withContext(path);
      t = std::move(r.value());
    }
    if (!spec.shape.empty()) {
      Shape s{t.rank() ? t.dim(0) : 1};
      s.insert(s.end(), spec.shape.begin(), spec.shape.end());
      if (numElements(s) != t.size())
        return Status::error(path + ": cannot reshape " + shapeToString(t.shape()) + " to " +
                             shapeToString(s) + " (\"shape\" is the per-sample shape)");
      t = t.reshaped(s);
    }
    if (d.columns.count(spec.input))
      return Status::error(path + ": input '" + spec.input + "' is fed by two files");
    d.columns[spec.input] = std::move(t);
  }
  DW_RETURN_IF_ERROR(d.validate());
  return d;
}

}  // namespace dw::engine::training
