// File access with the guarantees deepwire promises: saves are atomic (a temporary file in the
// same folder, flushed, then renamed over the target), and loads never modify their source.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "nodes/status.h"

namespace dw {

// An error, naming `path`, where it is a folder, a device (/dev/zero would be read without end)
// or a socket; a file or a pipe is fine. Every reader of a file someone names (models,
// projects, tensors, data sources) asks here first.
Status regularFile(const std::string& path);
Result<std::string> readFile(const std::string& path);
Status writeFileAtomic(const std::string& path, const std::string& bytes);
// Folder `dir`, made where missing, takes a file: a run checks where it will write before it
// works (a read-only or full file system was found after an epoch of training). It writes and
// removes kWriteProbe there.
Status writableDir(const std::string& dir);
constexpr const char* kWriteProbe = ".deepwire-write-test";

// An exclusive claim on folder `dir` for as long as the object lives (an flock on kFolderLock
// there, which the system drops when the process ends, however it ends: no stale locks). Two
// runs writing checkpoints into one folder overwrote each other's saves without a word.
class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(FolderLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FolderLock& operator=(FolderLock&& o) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

  // The claim, or an error naming the folder, the process that holds it, and `advice`.
  static Result<FolderLock> take(const std::string& dir, const std::string& advice);

 private:
  int fd_ = -1;
};
constexpr const char* kFolderLock = ".deepwire-lock";

Result<onnx::ModelProto> readOnnxFile(const std::string& path);
Status writeOnnxFile(const onnx::ModelProto& model, const std::string& path);

// A model from either kind of file: .onnx as is, .dwproj lowered by exportOnnx.
Result<onnx::ModelProto> loadAsOnnx(const std::string& path);

}  // namespace dw
