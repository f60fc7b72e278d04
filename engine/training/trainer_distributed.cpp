// Data-parallel training's collective steps (Trainer::setCommunicator): what every process
// exchanges so that all of them hold the same model after each optimizer step.
#include <algorithm>
#include <cstring>

#include "engine/training/trainer_impl.h"

namespace dw::engine::training {

namespace {

// Optimizer state as bytes, so that ranks which have none yet (rank 0 resumed a checkpoint)
// take rank 0's: per parameter its step, then each named buffer's name and values.
void put(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <class T>
void putValue(std::string& out, T v) {
  put(out, &v, sizeof v);
}
std::string packState(const std::vector<ParamEntry>& params) {
  std::string out;
  for (const auto& p : params) {
    putValue<int64_t>(out, p.state.step);
    putValue<uint64_t>(out, p.state.buffers.size());
    for (const auto& [name, values] : p.state.buffers) {
      putValue<uint64_t>(out, name.size());
      put(out, name.data(), name.size());
      putValue<uint64_t>(out, values.size());
      put(out, values.data(), values.size() * sizeof(float));
    }
  }
  return out;
}
class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <class T>
  T value() {
    T v{};
    std::memcpy(&v, s_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  void bytes(void* p, size_t n) {
    std::memcpy(p, s_.data() + at_, n);
    at_ += n;
  }

 private:
  const std::string& s_;
  size_t at_ = 0;
};
void unpackState(const std::string& in, std::vector<ParamEntry>& params) {
  Reader r(in);
  for (auto& p : params) {
    p.state.step = r.value<int64_t>();
    p.state.buffers.clear();
    const auto buffers = r.value<uint64_t>();
    for (uint64_t b = 0; b < buffers; ++b) {
      std::string name(r.value<uint64_t>(), '\0');
      r.bytes(name.data(), name.size());
      std::vector<float> values(r.value<uint64_t>());
      r.bytes(values.data(), values.size() * sizeof(float));
      p.state.buffers[name] = std::move(values);
    }
  }
}

}  // namespace

bool Trainer::Impl::distributed() const {
  return comm && comm->size() > 1;
}

Status Trainer::Impl::broadcastFromRoot() {
  if (dev)
    return Status::error(
        "distributed training runs on the cpu accelerator for now: train with --accelerator cpu");
  DW_RETURN_IF_ERROR(syncHost());
  int64_t c[5] = {counters.epoch, counters.batchInEpoch, counters.optimizerSteps,
                  counters.trainSteps, counters.accumulated};
  DW_RETURN_IF_ERROR(comm->broadcast(c, sizeof c, 0));
  counters = {c[0], c[1], c[2], c[3], c[4]};
  double sums[2] = {epochLossSum, epochSeconds};
  DW_RETURN_IF_ERROR(comm->broadcast(sums, sizeof sums, 0));
  DW_RETURN_IF_ERROR(comm->broadcast(&epochSamples, sizeof epochSamples, 0));
  epochLossSum = sums[0];
  epochSeconds = sums[1];
  // Every rank built the same graph, so the maps hold the same names, shapes and order.
  for (auto& [name, w] : weights) DW_RETURN_IF_ERROR(comm->broadcast(w.raw(), w.bytes(), 0));
  std::string state = packState(params);
  uint64_t size = state.size();
  DW_RETURN_IF_ERROR(comm->broadcast(&size, sizeof size, 0));
  state.resize(size);
  DW_RETURN_IF_ERROR(comm->broadcast(state.data(), static_cast<int64_t>(size), 0));
  if (comm->rank() != 0) unpackState(state, params);
  return Status();
}

Status Trainer::Impl::sumGradients() {
  const double backwardEnd = secondsNow();
  for (const auto& p : params) {
    Tensor& g = grads.at(p.name);
    DW_RETURN_IF_ERROR(comm->allreduceSum(g.data<float>(), g.size()));
  }
  markSums(backwardEnd);
  return Status();
}

Status Trainer::Impl::broadcastStatistics() {
  for (const auto& [stat, out] : stats) {
    Tensor& t = weights.at(stat);
    DW_RETURN_IF_ERROR(comm->broadcast(t.raw(), t.bytes(), 0));
  }
  return Status();
}

// The first bucket is small, so that its sum starts early in the backward pass; the others are
// large enough that a sum's fixed cost is small against its transfer.
constexpr int64_t kFirstBucketBytes = 1 << 20;

Status Trainer::Impl::bucketGradient(size_t param, const Tensor& g) {
  const Tensor& w = weights.at(params[param].name);
  if (g.size() != w.size() || g.dtype() != DType::kFloat)
    return Status::error("gradient '" + gg.gradOutputs[param] + "' has shape " +
                         shapeToString(g.shape()) + ", the weight has " + shapeToString(w.shape()));
  if (openBucket == buckets.size()) buckets.emplace_back();
  GradBucket& b = buckets[openBucket];
  if (b.members.empty()) b.used = 0;
  const size_t need = static_cast<size_t>(b.used + g.size()) * sizeof(float);
  if (!b.storage || b.storage->capacity < need) {
    // Only while the buckets take their shape, in the first steps: a fresh buffer, so that
    // views of the old one stay valid.
    auto grown = std::make_shared<Buffer>(need);
    if (b.used > 0) std::copy_n(b.data(), b.used, static_cast<float*>(grown->data));
    b.storage = std::move(grown);
  }
  const float* src = g.data<float>();
  float* dst = b.data() + b.used;
  const float f = static_cast<float>(gradWeight);
  for (int64_t k = 0; k < g.size(); ++k) dst[k] = src[k] * f;
  b.members.emplace_back(param, b.used);
  b.used += g.size();
  const int64_t limit =
      openBucket == 0 ? std::min(kFirstBucketBytes, opt.bucketBytes) : opt.bucketBytes;
  if (b.used * static_cast<int64_t>(sizeof(float)) >= limit) return closeBucket();
  return Status();
}

Status Trainer::Impl::closeBucket() {
  if (openBucket == buckets.size() || buckets[openBucket].members.empty()) return Status();
  GradBucket& b = buckets[openBucket++];
  return comm->startSum(b.data(), b.used);
}

// Completes the sums and hands each weight its summed gradient.
Status Trainer::Impl::finishBuckets() {
  const double backwardEnd = secondsNow();
  DW_RETURN_IF_ERROR(closeBucket());
  DW_RETURN_IF_ERROR(comm->finishSums());
  markSums(backwardEnd);
  for (size_t k = 0; k < openBucket; ++k) {
    GradBucket& b = buckets[k];
    for (const auto& [param, offset] : b.members) {
      const std::string& name = params[param].name;
      const Tensor& w = weights.at(name);
      // A view of the bucket, holding it: copying 1.7 MB a step out of it cost the CNN's
      // overlapped step more than the sums it hid.
      auto view =
          std::make_shared<Buffer>(b.data() + offset, static_cast<size_t>(w.size()) * sizeof(float),
                                   Device::kHost, [keep = b.storage](void*) {});
      grads[name] = Tensor(DType::kFloat, w.shape(), std::move(view));
    }
    b.members.clear();
  }
  openBucket = 0;
  return Status();
}

void Trainer::Impl::markSums(double backwardEnd) {
  sumMarks.push_back(backwardEnd);
  sumMarks.push_back(secondsNow());
}

// Every process's marks reach every process (a sum in which each fills its own slots), so
// that each knows when the last backward pass of a step ended. Clocks of different machines
// are not comparable, so there the split is not reported.
Status Trainer::Impl::splitWait(EpochReport& er) {
  const std::vector<std::string>& hosts = comm->hosts();
  if (std::any_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h != hosts[0]; }))
    return Status();
  // The step counts agree (every process takes every step), but a disagreement must not read
  // past the buffer: the counts go first.
  const int64_t p = comm->size(), me = comm->rank(), n = static_cast<int64_t>(sumMarks.size());
  std::vector<double> counts(static_cast<size_t>(p), 0.0);
  counts[static_cast<size_t>(me)] = static_cast<double>(n);
  DW_RETURN_IF_ERROR(comm->allreduceSum(counts.data(), p));
  if (std::any_of(counts.begin(), counts.end(), [&](double c) { return c != n; })) return Status();
  std::vector<double> all(static_cast<size_t>(p * n), 0.0);
  std::copy(sumMarks.begin(), sumMarks.end(), all.begin() + me * n);
  DW_RETURN_IF_ERROR(comm->allreduceSum(all.data(), p * n));
  const SumWait w = splitSumWait(all, p, me);
  er.sumSeconds = w.sums;
  er.skewSeconds = w.skew;
  return Status();
}

// Until the last process has ended its backward pass, a process waits for it (skew); after
// that, for the sums themselves. A process that ends last has no skew.
SumWait splitSumWait(const std::vector<double>& all, int64_t processes, int64_t me) {
  SumWait w;
  if (processes <= 0 || me < 0 || me >= processes) return w;
  const int64_t n = static_cast<int64_t>(all.size()) / processes;
  const double* mine = all.data() + me * n;
  for (int64_t s = 0; s + 1 < n; s += 2) {
    double lastEnd = mine[s];
    for (int64_t r = 0; r < processes; ++r) lastEnd = std::max(lastEnd, all[r * n + s]);
    const double end = mine[s], ready = mine[s + 1];
    w.skew += std::max(0.0, std::min(ready, lastEnd) - end);
    w.sums += std::max(0.0, ready - lastEnd);
  }
  return w;
}

// This rank's losses and metrics are means over its slice: weighted by the slice's samples and
// summed, they become the global batch's means.
Result<bool> Trainer::Impl::reduceStep(StepResult& r, int64_t globalSamples, bool stop) {
  std::vector<double> v;
  const double n = static_cast<double>(r.samples);
  // A sum over the batch adds up; a mean is weighted by the slice's samples.
  const bool sums = !summedLosses.empty();
  for (const auto& l : meta.losses)
    v.push_back(r.losses.count(l) ? r.losses[l] * (sums ? 1.0 : n) : 0.0);
  for (const auto& [name, m] : r.batchMetrics) v.push_back(m * n);
  v.push_back(stop ? 1.0 : 0.0);
  DW_RETURN_IF_ERROR(comm->allreduceSum(v.data(), static_cast<int64_t>(v.size())));
  const double total = static_cast<double>(globalSamples);
  size_t i = 0;
  for (const auto& l : meta.losses) {
    if (r.losses.count(l)) r.losses[l] = sums ? v[i] : v[i] / total;
    ++i;
  }
  for (auto& [name, m] : r.batchMetrics) m = v[i++] / total;
  r.metrics = r.batchMetrics;
  r.samples = globalSamples;
  return v[i] > 0;
}

// Every process evaluated at least one sample (evaluate shards only then), so each holds every
// metric's statistics, in the same shapes.
Status Trainer::Impl::reduceEvaluation(StepResult& total, MetricAccumulator& acc) {
  std::vector<double> v;
  for (const auto& l : meta.losses) v.push_back(total.losses.count(l) ? total.losses[l] : 0.0);
  v.push_back(static_cast<double>(total.samples));
  DW_RETURN_IF_ERROR(comm->allreduceSum(v.data(), static_cast<int64_t>(v.size())));
  size_t i = 0;
  for (const auto& l : meta.losses) {
    if (total.losses.count(l)) total.losses[l] = v[i];
    ++i;
  }
  total.samples = static_cast<int64_t>(v[i]);
  for (const auto& mi : meta.metrics) {
    auto it = acc.find(mi.name);
    if (it == acc.end()) continue;
    for (Tensor& sum : it->second.sums)
      DW_RETURN_IF_ERROR(comm->allreduceSum(sum.data<double>(), sum.size()));
    double batches = static_cast<double>(it->second.batches);
    DW_RETURN_IF_ERROR(comm->allreduceSum(&batches, 1));
    it->second.batches = static_cast<int64_t>(batches);
  }
  return Status();
}

void Trainer::setCommunicator(std::shared_ptr<distributed::Communicator> comm) {
  impl_->comm = std::move(comm);
}

}  // namespace dw::engine::training
