// Training data: readers for IDX (gzip or plain), CSV and NPY files, an in-memory Dataset whose
// columns feed graph inputs by name, and a BatchLoader that shuffles with a seed and prepares the
// next batches in a background thread so a training step never waits for data.
//
// Contract: every reader fails with a message naming the file and the byte offset (binary
// formats) or line (CSV) where the data is corrupt or truncated. Shuffling depends only on
// (seed, epoch), so an epoch's order can be recomputed when resuming from a checkpoint.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/io.h"
#include "engine/tensor.h"
#include "nodes/status.h"

namespace dw::engine::training {

// ---- Readers --------------------------------------------------------------------------------

// IDX (the MNIST format): magic 0x0000TTRR, dims as big-endian uint32, then the data. A ".gz"
// file (or any file starting with the gzip magic) is decompressed with zlib. Returns the data in
// its stored dtype (uint8 for images and labels).
Result<Tensor> readIdx(const std::string& path);

// NPY: the engine's one codec (engine/io.h), named here too for the training code's callers.
using dw::engine::readNpy;
using dw::engine::writeNpy;

// Whether a CSV's first line names its columns: a line of numbers is a data row (a file
// written without a header lost its first sample), except 0, 1, 2, ..., the names pandas
// writes for unnamed columns.
bool csvLineIsHeader(const std::vector<std::string>& cells);

struct CsvOptions {
  bool header = true;  // the first line names the columns, if it is a header (csvLineIsHeader)
  char delimiter = ',';
  std::string labelColumn;  // by name (needs header) or a 0-based index as text; "" = none
  // kInt64 for class indices (a fraction is an error); kUndefined: as stored, int64 where every
  // label is a whole number, else float32 (a regression target).
  DType labelType = DType::kInt64;
  // Columns to use as features, by name or 0-based index as text; empty = every column except
  // the label. Only the feature and label columns must hold numbers.
  std::vector<std::string> featureColumns;
  int64_t maxRows = 0;  // read only the first maxRows data rows (previews); 0 = all
};
struct CsvData {
  Tensor features;               // float32 [rows, features]
  std::optional<Tensor> labels;  // [rows] of labelType when a label column is given
  std::vector<std::string> featureNames;
  std::vector<std::string> columns;  // every column's name: the header's, or "0", "1", ...
};
// Errors name the line (and column): "f.csv line 7: 3 fields, the header has 5".
Result<CsvData> readCsv(const std::string& path, const CsvOptions& options = {});
// One CSV line into trimmed fields ("" quotes an embedded quote), as readCsv splits it; false
// when a quoted field is still open at the line's end (fields spanning lines are refused).
bool splitCsvLine(const std::string& line, char delim, std::vector<std::string>& out);

// What a data panel shows before reading a whole file. Header-only: IDX and NPY read their
// first bytes (a .gz IDX inflates only those); CSV reads its header line and counts the lines.
struct SourceHeader {
  std::string format;               // "idx", "npy" or "csv"
  Shape shape;                      // the sample dim first; CSV: [rows, columns]
  DType dtype = DType::kUndefined;  // CSV: float32 (what readCsv's features are)
  std::vector<std::string> csvColumns;
};
// A plain IDX or NPY file whose size does not match its header already fails here (truncated);
// a gzip IDX file's size is only checked by readIdx.
Result<SourceHeader> readIdxHeader(const std::string& path);
Result<SourceHeader> readNpyHeader(const std::string& path);
Result<SourceHeader> readCsvHeader(const std::string& path, const CsvOptions& options = {});

// ---- Normalization ----------------------------------------------------------------------------

// value' = (value * scale - mean) / std, elementwise, result float32.
struct Normalization {
  double scale = 1.0;
  double mean = 0.0;
  double std = 1.0;
  bool isIdentity() const { return scale == 1.0 && mean == 0.0 && std == 1.0; }
};
Result<Tensor> normalize(const Tensor& src, const Normalization& n);

// ---- Datasets and batches ---------------------------------------------------------------------

// Columns keyed by graph input name; every column has the sample count as its first dim.
struct Dataset {
  std::map<std::string, Tensor> columns;
  // Where each sample sits in the files it was read from, for a split that gathered some of
  // them (empty: in order, sample i is the files' sample i). Errors name the files' index.
  std::vector<int64_t> origin;
  int64_t originOf(int64_t i) const { return origin.empty() ? i : origin[static_cast<size_t>(i)]; }
  int64_t size() const;
  // Checks that every column has the same first dim; names the offending column otherwise.
  Status validate() const;
  // Samples [begin, end) as a new dataset (copies).
  Dataset slice(int64_t begin, int64_t end) const;
  // Samples at `indices`, in that order (copies).
  Dataset gather(const std::vector<int64_t>& indices) const;
};

struct Batch {
  std::map<std::string, Tensor> inputs;  // graph input name -> [batch, ...]
  int64_t size = 0;                      // samples in this batch
};

// Deterministic permutation of [0, n) for (seed, epoch): the same on every machine (own
// splitmix64-based Fisher-Yates, independent of the standard library's distributions).
std::vector<int64_t> shuffledIndices(int64_t n, uint64_t seed, int64_t epoch);

struct LoaderOptions {
  int64_t batchSize = 32;
  bool shuffle = true;
  bool dropLast = false;  // drop a final partial batch
  uint64_t seed = 0;
  int prefetch = 4;  // batches prepared ahead by the background thread
  // Storage for a batch column of `bytes` where no released one can be reused: page-locked
  // memory for a trainer on a GPU (Trainer::batchStorage); null, or a null result: plain memory.
  std::function<std::shared_ptr<Buffer>(size_t bytes)> hostBuffers;
};

// Produces the batches of one epoch at a time. A background thread gathers the next `prefetch`
// batches while the caller trains on the current one.
class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Dataset> data, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts `epoch` (its own shuffle order), skipping its first `skipBatches` batches (resume).
  void startEpoch(int64_t epoch, int64_t skipBatches = 0);
  // The next batch of the current epoch, or nullopt at the epoch's end.
  std::optional<Batch> next();
  int64_t batchesPerEpoch() const;
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *data_; }

 private:
  void stopWorker();
  void work(int64_t epoch, int64_t firstBatch);
  Batch makeBatch(const std::vector<int64_t>& order, int64_t batchIndex);
  // Storage of a batch the consumer has released, of about `bytes`; nullptr if none. Batches
  // reuse it, so an epoch allocates (and page-faults) only its first few batches.
  std::shared_ptr<Buffer> reusable(size_t bytes);

  std::shared_ptr<const Dataset> data_;
  LoaderOptions options_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::vector<std::shared_ptr<Buffer>> recycled_;  // worker thread only
  bool workerDone_ = true;
  std::atomic<bool> stop_{false};
};

}  // namespace dw::engine::training
