#include "graphs/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "graphs/onnx_export.h"
#include "graphs/project.h"

namespace dw {

namespace fs = std::filesystem;

Result<std::string> readFile(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Status::error(path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::error(path + ": read error");
  return ss.str();
}

Status writeFileAtomic(const std::string& path, const std::string& bytes) {
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::random_device rd;
  const fs::path tmp = dir / ("." + target.filename().string() + ".tmp" + std::to_string(rd()));
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
      return Status::error(path + ": write failed (" + err + "); the original is untouched");
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error(path + ": write failed (" + err + "); the original is untouched");
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error(path + ": cannot replace (" + err + "); the original is untouched");
  }
  return Status();
}

Result<onnx::ModelProto> readOnnxFile(const std::string& path) {
  auto bytes = readFile(path);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto m;
  if (bytes->empty() || !m.ParseFromString(*bytes))
    return Status::error(path + ": not a valid ONNX model (the protobuf could not be parsed; "
                                "the file may be truncated or of another format)");
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
