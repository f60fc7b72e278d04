#include "graphs/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "graphs/onnx_export.h"
#include "graphs/project.h"
#include "graphs/tensor_data.h"

namespace dw {

namespace fs = std::filesystem;

Status regularFile(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return Status();  // the open says what is wrong
  if (fs::is_directory(st)) return Status::error(path + ": is a directory, not a file");
  // A pipe ends when its writer does (`--input /dev/stdin`); a device such as /dev/zero never
  // does, and was read until memory ran out.
  if (!fs::is_regular_file(st) && !fs::is_fifo(st))
    return Status::error(path + ": is a device or a socket, not a file (it would be read " +
                         "without end); give a file");
  return Status();
}

Result<std::string> readFile(const std::string& path) {
  DW_RETURN_IF_ERROR(regularFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::error(path + ": read error");
  return ss.str();
}

Status writableDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create the folder: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) return Status::error(dir + ": not a folder");
  const std::filesystem::path probe = std::filesystem::path(dir) / kWriteProbe;
  {
    std::ofstream f(probe);
    if (!(f << "ok") || !f.flush())
      return Status::error(dir + ": cannot write there (" + std::strerror(errno) + ")");
  }
  std::filesystem::remove(probe, ec);
  return Status();
}

FolderLock& FolderLock::operator=(FolderLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

Result<FolderLock> FolderLock::take(const std::string& dir, const std::string& advice) {
  const fs::path path = fs::path(dir) / kFolderLock;
  // The file stays after the run: removing it could let a third run lock a new file while a
  // second holds the old one.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK)
      return Status::error(path.string() + ": cannot lock (" + std::strerror(err) + ")");
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    holder.erase(
        std::remove_if(holder.begin(), holder.end(), [](char c) { return c < '0' || c > '9'; }),
        holder.end());
    return Status::error(dir + ": another run" +
                         (holder.empty() ? std::string() : " (process " + holder + ")") +
                         " is using this folder; " + advice);
  }
  // Who holds it, for the message another run gives.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The claim holds without the note.
  }
  FolderLock lock;
  lock.fd_ = fd;
  return lock;
}

Status writeFileAtomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::random_device rd;
  const fs::path tmp = dir / ("." + target.filename().string() + ".tmp" + std::to_string(rd()));
  std::error_code ec;
  // Said only where there is an original to keep.
  const std::string kept = fs::exists(target, ec) ? "; the original is untouched" : "";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return Status::error(path + ": cannot write (" + std::strerror(errno) + ")");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::error(path + ": write failed (" + err + ")" + kept);
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error(path + ": write failed (" + err + ")" + kept);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error(path + ": cannot replace (" + err + ")" + kept);
  }
  return Status();
}

namespace {

// Where a ModelProto's bytes stop making sense, found by walking protobuf's wire format (tags,
// varints, lengths) over the model and into its graph: "" where the walk finds nothing wrong.
class WireWalk {
 public:
  explicit WireWalk(const std::string& b) : b_(b) {}

  std::string model() { return walk(0, b_.size(), nullptr, 0); }

 private:
  static const char* modelField(uint64_t f) {
    switch (f) {
      case 7:
        return "graph";
      case 8:
        return "opset_import";
      case 14:
        return "metadata_props";
      case 25:
        return "functions";
      default:
        return nullptr;
    }
  }
  static const char* graphField(uint64_t f) {
    switch (f) {
      case 1:
        return "node";
      case 5:
        return "initializer";
      case 11:
        return "input";
      case 12:
        return "output";
      case 13:
        return "value_info";
      case 15:
        return "sparse_initializer";
      default:
        return nullptr;
    }
  }

  bool varint(size_t& pos, size_t end, uint64_t& v) const {
    v = 0;
    for (int shift = 0; shift < 64 && pos < end; shift += 7) {
      const auto c = static_cast<unsigned char>(b_[pos++]);
      v |= uint64_t(c & 0x7f) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  }

  // `in`: what encloses [begin, end) ("the graph"), null at the top.
  std::string walk(size_t begin, size_t end, const char* in, int depth) {
    std::map<uint64_t, int> counts;
    size_t pos = begin;
    while (pos < end) {
      const size_t start = pos;
      uint64_t tag = 0;
      const std::string where = std::string(in ? std::string(" in ") + in : "");
      if (!varint(pos, end, tag))
        return "byte " + std::to_string(start) + where + " starts a field that runs past the end";
      const uint64_t field = tag >> 3, wire = tag & 7;
      const char* named = depth == 0 ? modelField(field) : graphField(field);
      const int index = counts[field]++;
      const std::string what = named ? std::string(in ? std::string(in) + "'s " : "") + named +
                                           (depth == 1 ? " " + std::to_string(index) : "")
                                     : "field " + std::to_string(field) + where;
      if (field == 0) return "byte " + std::to_string(start) + where + " holds no valid field";
      uint64_t n = 0;
      switch (wire) {
        case 0:
          if (!varint(pos, end, n))
            return what + " (from byte " + std::to_string(start) + ") runs past the end";
          break;
        case 1:
        case 5:
          pos += wire == 1 ? 8 : 4;
          if (pos > end)
            return what + " (from byte " + std::to_string(start) + ") runs past the end";
          break;
        case 2: {
          if (!varint(pos, end, n))
            return what + " (from byte " + std::to_string(start) + ") runs past the end";
          // The graph's elements are walked even when the graph runs past the end: the one
          // that the cut falls in is the better answer.
          if (depth == 0 && field == 7) {
            std::string inner = walk(pos, std::min<uint64_t>(end, pos + n), "the graph", 1);
            if (!inner.empty()) return inner;
          }
          if (n > end - pos)
            return what + " (from byte " + std::to_string(start) + ") needs " + std::to_string(n) +
                   " bytes, but only " + std::to_string(end - pos) + " remain" +
                   (end == b_.size() ? " in the file (" + std::to_string(b_.size()) + " bytes)"
                                     : "");
          pos += n;
          break;
        }
        default:
          return what + " (byte " + std::to_string(start) + ") has wire type " +
                 std::to_string(wire) + ", which no ONNX field uses";
      }
    }
    return "";
  }

  const std::string& b_;
};

}  // namespace

Result<onnx::ModelProto> readOnnxFile(const std::string& path) {
  auto bytes = readFile(path);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto m;
  if (bytes->empty()) return Status::error(path + ": not a valid ONNX model (the file is empty)");
  if (!m.ParseFromString(*bytes)) {
    // A text file (a script, a JSON project, a CSV) is the common wrong file: say so rather
    // than name a protobuf field. A model starts with field 1, ir_version (byte 0x08).
    const size_t head = std::min<size_t>(bytes->size(), 256);
    const bool text =
        (*bytes)[0] != 0x08 &&
        std::all_of(bytes->begin(), bytes->begin() + static_cast<long>(head), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return u >= 0x20 || u == '\n' || u == '\r' || u == '\t';
        });
    if (text)
      return Status::error(
          path + ": not an ONNX model but a text file" +
          ((*bytes)[0] == '{' ? " (a JSON file: a deepwire project is a .dwproj)" : std::string()) +
          "; give the .onnx file");
    // Say where the bytes go wrong: a file cut short shows as a field that needs more bytes
    // than are left.
    const std::string where = WireWalk(*bytes).model();
    return Status::error(path + ": not a valid ONNX model (the protobuf could not be parsed" +
                         (where.empty() ? std::string("; the file may be of another format, or "
                                                      "nest subgraphs deeper than protobuf reads")
                                        : ": " + where + "; the file is truncated or damaged") +
                         ")");
  }
  // Weights kept beside the model (onnx.save_model's save_as_external_data) come from the
  // model's folder, wherever the command runs: they were looked for in the current one, and
  // a project imported from such a model could not run.
  if (Status st = inlineExternalData(m, fs::path(path).parent_path().string()); !st.ok())
    return st.withContext(path);
  return m;
}

Status writeOnnxFile(const onnx::ModelProto& model, const std::string& path) {
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return Status::error(path + ": the model could not be serialized (over 2 GiB?)");
  return writeFileAtomic(path, bytes);
}

Result<onnx::ModelProto> loadAsOnnx(const std::string& path) {
  if (fs::path(path).extension() == ".dwproj") {
    auto g = loadProject(path);
    if (!g.ok()) return g.status();
    auto m = exportOnnx(*g);
    if (!m.ok()) return m.status().withContext(path);
    return m;
  }
  return readOnnxFile(path);
}

}  // namespace dw
