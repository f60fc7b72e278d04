#include "engine/training/trainer_impl.h"

namespace dw::engine::training {

// ---- Checkpoints ------------------------------------------------------------------------------
// A directory: checkpoint.json (counters, optimizer config, per-tensor index) and one raw
// little-endian NPY file per tensor, so values round-trip bit for bit.

namespace {

// The tensor files a save writes (tN.npy before generations, gG_tN.npy since).
const std::regex& tensorFileName() {
  static const std::regex kTensorFile("(g[0-9]+_)?t[0-9]+\\.npy");
  return kTensorFile;
}

// Whether `dir` may take a checkpoint: it holds one already, or nothing but tensor files a save
// wrote (one a kill interrupted before its checkpoint.json). A save removes those files of its
// earlier saves by name: in a folder of other files it deleted a user's g0_t3.npy.
Status checkpointDirOk(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "checkpoint.json", ec)) return Status();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kWriteProbe || name == kFolderLock) continue;  // a kill's, or a run's claim
    if (!std::regex_match(name, tensorFileName()))
      return Status::error(dir + ": holds " + name +
                           " and no checkpoint.json, so it is no checkpoint directory; give a new "
                           "or empty one (a checkpoint replaces its own files there)");
  }
  return Status();
}

// checkpoint.json of `dir`, parsed and checked to be one.
Result<json> readCheckpointJson(const std::string& dir) {
  const fs::path jp = fs::path(dir) / "checkpoint.json";
  std::ifstream f(jp);
  if (!f) return Status::error(jp.string() + ": cannot open (not a checkpoint directory?)");
  json j;
  try {
    j = json::parse(f);
  } catch (const std::exception& e) {
    return Status::error(jp.string() + ": " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "deepwire-checkpoint")
    return Status::error(jp.string() + ": not a deepwire checkpoint");
  return j;
}

TrainerCounters countersOf(const json& j) {  // throws on a missing or mistyped counter
  TrainerCounters c;
  const json& cj = j.at("counters");
  c.epoch = cj.at("epoch");
  c.batchInEpoch = cj.at("batch_in_epoch");
  c.optimizerSteps = cj.at("optimizer_steps");
  c.trainSteps = cj.at("train_steps");
  c.accumulated = cj.at("accumulated");
  return c;
}

}  // namespace

Status copyCheckpoint(const std::string& from, const std::string& to) {
  auto j = readCheckpointJson(from);
  if (!j) return j.status();
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Status::error(to + ": cannot create checkpoint directory: " + ec.message());
  // The tensors first, checkpoint.json (which names them) last and atomically: a copy cut short
  // leaves whatever checkpoint the folder held before.
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, tensorFileName())) continue;
    if (!fs::copy_file(e.path(), fs::path(to) / name, fs::copy_options::overwrite_existing, ec))
      return Status::error((fs::path(to) / name).string() + ": cannot write: " + ec.message());
  }
  if (ec) return Status::error(from + ": cannot read: " + ec.message());
  return writeFileAtomic((fs::path(to) / "checkpoint.json").string(), j->dump(1));
}

Result<TrainerCounters> readCheckpointCounters(const std::string& dir) {
  auto j = readCheckpointJson(dir);
  if (!j) return j.status();
  try {
    return countersOf(*j);
  } catch (const std::exception& e) {
    return Status::error((fs::path(dir) / "checkpoint.json").string() + ": counters: " + e.what());
  }
}

Status Trainer::checkCheckpointDir(const std::string& dir) {
  DW_RETURN_IF_ERROR(writableDir(dir).withContext("the checkpoint"));
  return checkpointDirOk(dir);
}

Status Trainer::Impl::save(const std::string& dir) const {
  DW_RETURN_IF_ERROR(syncHost());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::error(dir + ": cannot create checkpoint directory: " + ec.message());
  DW_RETURN_IF_ERROR(checkpointDirOk(dir));
  json j;
  j["format"] = "deepwire-checkpoint";
  j["version"] = 1;
  j["counters"] = {{"epoch", counters.epoch},
                   {"batch_in_epoch", counters.batchInEpoch},
                   {"optimizer_steps", counters.optimizerSteps},
                   {"train_steps", counters.trainSteps},
                   {"accumulated", counters.accumulated}};
  j["epoch_sums"] = {{"loss", epochLossSum}, {"samples", epochSamples}, {"seconds", epochSeconds}};
  j["rng"] = {{"seed", opt.seed}};  // shuffles derive from (seed, epoch); nothing else draws
  j["optimizer"] = configJson(opt.optimizer);
  j["base_lr"] = baseLr;
  if (batchSize > 0) j["batch_size"] = batchSize;  // what batch_in_epoch counts
  j["history"] = json::array();
  for (const EpochReport& e : history) {
    json h = {{"epoch", e.epoch},
              {"train_loss", e.trainLoss},
              {"steps", e.steps},
              {"train_steps", e.trainSteps},
              {"seconds", e.seconds}};
    for (const auto& [k, v] : e.trainMetrics) h["train_metrics"][k] = v;
    if (e.hasTest) {
      h["test_loss"] = e.testLoss;
      for (const auto& [k, v] : e.testMetrics) h["test_metrics"][k] = v;
      if (e.testAccuracy >= 0) h["test_accuracy"] = e.testAccuracy;
    }
    j["history"].push_back(std::move(h));
  }
  // Each save writes its tensors under new names (a generation one above the checkpoint.json
  // on disk), so that a save killed half way leaves the previous checkpoint whole: its json
  // names only files this save does not touch.
  int64_t generation = 0;
  {
    std::ifstream old(fs::path(dir) / "checkpoint.json");
    const json prev = old ? json::parse(old, nullptr, false) : json();
    if (prev.is_object() && prev.contains("generation") && prev["generation"].is_number_integer())
      generation = prev["generation"].get<int64_t>() + 1;
  }
  j["generation"] = generation;
  int fileNo = 0;
  std::set<std::string> written;
  auto put = [&](const Tensor& t) -> Result<std::string> {
    const std::string file =
        "g" + std::to_string(generation) + "_t" + std::to_string(fileNo++) + ".npy";
    DW_RETURN_IF_ERROR(writeFileAtomic((fs::path(dir) / file).string(), serializeNpy(t)));
    written.insert(file);
    return file;
  };
  for (const auto& [name, t] : weights) {
    auto f = put(t);
    if (!f) return f.status();
    j["weights"][name] = *f;
  }
  for (const auto& p : params) {
    json pj;
    pj["step"] = p.state.step;
    for (const auto& [bn, buf] : p.state.buffers) {
      Tensor t = Tensor::fromVector(buf, {static_cast<int64_t>(buf.size())});
      auto f = put(t);
      if (!f) return f.status();
      pj["buffers"][bn] = *f;
    }
    if (counters.accumulated > 0) {
      auto f = put(grads.at(p.name));
      if (!f) return f.status();
      pj["grad"] = *f;
    }
    j["params"][p.name] = pj;
  }
  for (const auto& [name, m] : evalSums) {
    json mj = {{"batches", m.batches}, {"stats", json::array()}};
    for (const Tensor& t : m.sums) {
      auto f = put(t);
      if (!f) return f.status();
      mj["stats"].push_back(*f);
    }
    j["eval_metrics"][name] = mj;
  }
  // Written last and atomically (fsync, then rename): a checkpoint.json names only tensors that
  // are already on disk.
  DW_RETURN_IF_ERROR(writeFileAtomic((fs::path(dir) / "checkpoint.json").string(), j.dump(1)));
  // Then the tensors of earlier saves go: no checkpoint.json names them any more. Only names this
  // code writes (tN.npy before generations, gG_tN.npy since), nothing else in the directory.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!written.count(name) && std::regex_match(name, tensorFileName())) fs::remove(e.path(), ec);
  }
  return Status();
}

Status Trainer::Impl::load(const std::string& dir, bool weightsOnly) {
  const fs::path jp = fs::path(dir) / "checkpoint.json";
  auto parsed = readCheckpointJson(dir);
  if (!parsed) return parsed.status();
  // Not const: a lookup of a missing section ("weights") reads as null instead of asserting.
  json j = std::move(*parsed);
  auto get = [&](const std::string& file, const std::string& what,
                 const Tensor* like) -> Result<Tensor> {
    auto t = readNpy((fs::path(dir) / file).string());
    if (!t) return t.status();
    if (like && (t->shape() != like->shape() || t->dtype() != like->dtype()))
      return Status::error(jp.string() + ": " + what + " has shape " + shapeToString(t->shape()) +
                           " but the model's has " + shapeToString(like->shape()) +
                           " (checkpoint of another model?)");
    return t;
  };
  try {
    // Validate everything before changing any state.
    std::map<std::string, Tensor> newWeights;
    for (const auto& [name, t] : weights) {
      if (!j["weights"].contains(name))
        return Status::error(jp.string() + ": no value for weight '" + name + "'");
      auto v = get(j["weights"][name], "weight '" + name + "'", &t);
      if (!v) return v.status();
      newWeights[name] = std::move(v.value());
    }
    auto takeWeights = [&] {
      weights = std::move(newWeights);
      devStale = dev != nullptr;
      hostStale = false;
    };
    if (weightsOnly) {  // evaluating: the optimizer's state and the counters do not matter
      takeWeights();
      return Status();
    }
    const TrainerCounters c = countersOf(j);
    std::vector<ParamState> states;
    std::map<std::string, Tensor> newGrads;
    for (const auto& p : params) {
      if (!j["params"].contains(p.name))
        return Status::error(jp.string() + ": no optimizer state for '" + p.name + "'");
      const json& pj = j["params"][p.name];
      ParamState s;
      s.step = pj.at("step");
      if (pj.contains("buffers"))
        for (auto it = pj["buffers"].begin(); it != pj["buffers"].end(); ++it) {
          auto t = get(it.value(), "state '" + it.key() + "' of '" + p.name + "'", nullptr);
          if (!t) return t.status();
          if (t->size() != weights.at(p.name).size() || t->dtype() != DType::kFloat)
            return Status::error(jp.string() + ": optimizer state '" + it.key() + "' of '" +
                                 p.name + "' has the wrong size");
          const float* d = t->data<float>();
          s.buffers[it.key()] = std::vector<float>(d, d + t->size());
        }
      states.push_back(std::move(s));
      if (c.accumulated > 0) {
        if (!pj.contains("grad"))
          return Status::error(jp.string() + ": accumulated gradient of '" + p.name + "' missing");
        auto t = get(pj["grad"], "gradient of '" + p.name + "'", &weights.at(p.name));
        if (!t) return t.status();
        newGrads[p.name] = std::move(t.value());
      }
    }
    // The Eval Step sums; a checkpoint without them (older ones) resumes with none.
    MetricAccumulator newSums;
    if (j.contains("eval_metrics"))
      for (auto it = j["eval_metrics"].begin(); it != j["eval_metrics"].end(); ++it) {
        const MetricInfo* mi = nullptr;
        for (const auto& m : meta.metrics)
          if (m.name == it.key()) mi = &m;
        if (!mi)
          return Status::error(jp.string() + ": accumulated metric '" + it.key() +
                               "' is not a metric of the model (checkpoint of another model?)");
        const json& stats = it.value().at("stats");
        if (stats.size() != mi->stats.size())
          return Status::error(jp.string() + ": metric '" + it.key() + "' has " +
                               std::to_string(stats.size()) + " statistics, the model's has " +
                               std::to_string(mi->stats.size()));
        MetricSums m;
        m.batches = it.value().at("batches");
        for (const auto& file : stats) {
          auto t = get(file, "statistic of metric '" + it.key() + "'", nullptr);
          if (!t) return t.status();
          if (t->dtype() != DType::kDouble)
            return Status::error(jp.string() + ": statistics of metric '" + it.key() +
                                 "' are not float64");
          m.sums.push_back(std::move(t.value()));
        }
        newSums[it.key()] = std::move(m);
      }
    // The epochs so far (none in checkpoints older than the history).
    std::vector<EpochReport> newHistory;
    if (j.contains("history")) {
      // JSON has no NaN: a diverged epoch's loss was written as null.
      auto number = [](const json& v) {
        return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
      };
      for (const json& h : j.at("history")) {
        EpochReport e;
        e.epoch = h.at("epoch");
        e.trainLoss = number(h.at("train_loss"));
        e.steps = h.at("steps");
        e.trainSteps = h.at("train_steps");
        e.seconds = number(h.value("seconds", json()));
        if (h.contains("train_metrics"))
          for (auto it = h["train_metrics"].begin(); it != h["train_metrics"].end(); ++it)
            e.trainMetrics[it.key()] = number(it.value());
        e.hasTest = h.contains("test_loss");
        if (e.hasTest) {
          e.testLoss = number(h["test_loss"]);
          if (h.contains("test_metrics"))
            for (auto it = h["test_metrics"].begin(); it != h["test_metrics"].end(); ++it)
              e.testMetrics[it.key()] = number(it.value());
          e.testAccuracy = h.contains("test_accuracy") ? number(h["test_accuracy"]) : -1;
        }
        newHistory.push_back(std::move(e));
      }
    }
    OptimizerConfig oc = opt.optimizer;
    if (j.contains("optimizer")) {
      OptimizerConfig loaded;
      DW_RETURN_IF_ERROR(parseOptimizer(j["optimizer"], jp.string() + "/optimizer", loaded));
      if (loaded.type != oc.type)
        return Status::error(jp.string() + ": the checkpoint's optimizer is '" + loaded.type +
                             "' but this training uses '" + oc.type + "', whose state differs; " +
                             "continue with " + loaded.type + " (the project's optimizer, the " +
                             "studio's Optimizer box, or deepwire train --optimizer " +
                             loaded.type + ")");
    }
    takeWeights();
    history = std::move(newHistory);
    evalSums = std::move(newSums);
    counters = c;
    for (size_t i = 0; i < params.size(); ++i) params[i].state = std::move(states[i]);
    if (c.accumulated > 0) {
      for (auto& [k, v] : newGrads) grads[k] = std::move(v);
    } else {
      resetGrad();
    }
    if (j.contains("epoch_sums")) {
      epochLossSum = j["epoch_sums"].value("loss", 0.0);
      epochSamples = j["epoch_sums"].value("samples", int64_t{0});
      epochSeconds = j["epoch_sums"].value("seconds", 0.0);
    }
    if (j.contains("rng") && j["rng"].contains("seed")) opt.seed = j["rng"]["seed"];
    if (j.contains("base_lr")) baseLr = j["base_lr"];
    batchSize = j.value("batch_size", int64_t{0});
  } catch (const std::exception& e) {
    return Status::error(jp.string() + ": malformed checkpoint: " + e.what());
  }
  return Status();
}

}  // namespace dw::engine::training
