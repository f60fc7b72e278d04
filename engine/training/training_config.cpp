// The project's training section: parsing, defaults and writing it back.
#include <cmath>
#include <filesystem>
#include <type_traits>

#include "engine/training/trainer_impl.h"

namespace dw::engine::training {

// ---- The project's training section ----------------------------------------------------------

namespace {

// Reads known keys from a JSON object and refuses unknown ones, naming the JSON path.
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  Status check() const {
    if (!j_.is_object()) return Status::error(path_ + ": expected an object");
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!known_.count(it.key()))
        return Status::error(path_ + "/" + it.key() + ": unknown key (known: " + knownList() + ")");
    return error_;
  }
  template <class T>
  void get(const char* key, T& out) {
    known_.insert(key);
    if (!j_.is_object() || !j_.contains(key) || !error_.ok()) return;
    try {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // The JSON library would truncate 10.5 to 10 and wrap -1 into an unsigned field.
        const json& v = j_.at(key);
        const bool whole =
            v.is_number_integer() ||
            (v.is_number_float() && std::isfinite(v.get<double>()) &&
             std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e15);
        const bool negative = v.is_number() && !v.is_number_unsigned() && v.get<double>() < 0;
        if (v.is_number() && (!whole || (std::is_unsigned_v<T> && negative))) {
          error_ = Status::error(path_ + "/" + key + ": expected a whole number" +
                                 (std::is_unsigned_v<T> ? " >= 0" : "") + ", got " + v.dump());
          return;
        }
      }
      out = j_.at(key).get<T>();
    } catch (const json::type_error&) {
      // What the key takes, in words, not the JSON library's exception text.
      const char* want = std::is_same_v<T, std::string> ? "a string (in quotes)"
                         : std::is_same_v<T, bool>      ? "true or false"
                         : std::is_arithmetic_v<T>      ? "a number"
                                                        : "a list";
      error_ =
          Status::error(path_ + "/" + key + ": expected " + want + ", got " + j_.at(key).dump());
    } catch (const std::exception& e) {
      error_ = Status::error(path_ + "/" + key + ": " + e.what());
    }
  }
  const json* sub(const char* key) {
    known_.insert(key);
    return j_.is_object() && j_.contains(key) ? &j_.at(key) : nullptr;
  }

 private:
  std::string knownList() const {
    std::string s;
    for (const auto& k : known_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  const json& j_;
  std::string path_;
  std::set<std::string> known_;
  Status error_;
};

Status parseFile(const json& j, const std::string& path, DataFileSpec& f) {
  Fields r(j, path);
  r.get("input", f.input);
  r.get("path", f.path);
  r.get("format", f.format);
  r.get("dtype", f.dtype);
  r.get("shape", f.shape);
  if (const json* s = r.sub("shape"); s && s->is_array() && s->empty()) f.scalarSamples = true;
  // A name or a column number; a number may be written as one (4) or as text ("4").
  if (const json* c = r.sub("csv_label_column"); c && c->is_number_integer())
    f.csvLabelColumn = std::to_string(c->get<int64_t>());
  else
    r.get("csv_label_column", f.csvLabelColumn);
  r.get("csv_header", f.csvHeader);
  r.get("csv_take_label", f.csvTakeLabel);
  r.get("csv_feature_columns", f.csvFeatureColumns);
  r.get("one_hot", f.oneHot);
  r.get("image_height", f.imageHeight);
  r.get("image_width", f.imageWidth);
  r.get("image_channels", f.imageChannels);
  r.get("image_take_label", f.imageTakeLabel);
  r.get("stored_dtype", f.storedDtype);
  r.get("stored_shape", f.storedShape);
  if (const json* n = r.sub("normalization")) {
    Fields rn(*n, path + "/normalization");
    rn.get("scale", f.normalization.scale);
    rn.get("mean", f.normalization.mean);
    rn.get("std", f.normalization.std);
    DW_RETURN_IF_ERROR(rn.check());
  }
  DW_RETURN_IF_ERROR(r.check());
  if (f.input.empty()) return Status::error(path + "/input: required (the graph input it feeds)");
  if (f.path.empty()) return Status::error(path + "/path: required");
  return Status();
}

Status parseFiles(const json* j, const std::string& path, std::vector<DataFileSpec>& out) {
  if (!j) return Status();
  if (!j->is_array()) return Status::error(path + ": expected an array of files");
  for (size_t i = 0; i < j->size(); ++i) {
    DataFileSpec f;
    DW_RETURN_IF_ERROR(parseFile((*j)[i], path + "/" + std::to_string(i), f));
    out.push_back(std::move(f));
  }
  return Status();
}

json fileToJson(const DataFileSpec& f) {
  json j = {{"input", f.input}, {"path", f.path}};
  if (!f.format.empty()) j["format"] = f.format;
  if (!f.dtype.empty()) j["dtype"] = f.dtype;
  if (f.reshapes()) j["shape"] = f.shape;
  if (!f.normalization.isIdentity())
    j["normalization"] = {{"scale", f.normalization.scale},
                          {"mean", f.normalization.mean},
                          {"std", f.normalization.std}};
  if (!f.csvLabelColumn.empty()) j["csv_label_column"] = f.csvLabelColumn;
  if (!f.csvHeader) j["csv_header"] = false;
  if (f.csvTakeLabel) j["csv_take_label"] = true;
  if (!f.csvFeatureColumns.empty()) j["csv_feature_columns"] = f.csvFeatureColumns;
  if (f.oneHot > 0) j["one_hot"] = f.oneHot;
  if (f.imageHeight > 0) j["image_height"] = f.imageHeight;
  if (f.imageWidth > 0) j["image_width"] = f.imageWidth;
  if (f.imageChannels > 0) j["image_channels"] = f.imageChannels;
  if (f.imageTakeLabel) j["image_take_label"] = true;
  if (!f.storedDtype.empty()) j["stored_dtype"] = f.storedDtype;
  if (!f.storedShape.empty()) j["stored_shape"] = f.storedShape;
  return j;
}

}  // namespace

Status parseOptimizer(const json& j, const std::string& path, OptimizerConfig& o) {
  Fields r(j, path);
  r.get("type", o.type);
  r.get("lr", o.lr);
  r.get("momentum", o.momentum);
  r.get("dampening", o.dampening);
  r.get("nesterov", o.nesterov);
  r.get("beta1", o.beta1);
  r.get("beta2", o.beta2);
  r.get("eps", o.eps);
  r.get("weight_decay", o.weightDecay);
  r.get("adamw_mode", o.adamwMode);
  r.get("amsgrad", o.amsgrad);
  r.get("alpha", o.alpha);
  r.get("centered", o.centered);
  r.get("lr_decay", o.lrDecay);
  r.get("initial_accumulator", o.initialAccumulator);
  r.get("clip_norm", o.clipNorm);
  if (const json* t = r.sub("clip_norm_type")) {
    if (t->is_string() && t->get<std::string>() == "inf")
      o.clipNormType = INFINITY;
    else if (t->is_number())
      o.clipNormType = t->get<double>();
    else
      return Status::error(path + "/clip_norm_type: a number or \"inf\"");
  }
  if (const json* s = r.sub("schedule")) {
    Fields rs(*s, path + "/schedule");
    rs.get("type", o.schedule.type);
    rs.get("step_size", o.schedule.stepSize);
    rs.get("gamma", o.schedule.gamma);
    rs.get("warmup_steps", o.schedule.warmupSteps);
    rs.get("total_steps", o.schedule.totalSteps);
    rs.get("min_lr", o.schedule.minLr);
    DW_RETURN_IF_ERROR(rs.check());
  }
  DW_RETURN_IF_ERROR(r.check());
  return validateOptimizerConfig(o).withContext(path);
}

Result<TrainingConfig> parseTrainingConfig(const std::string& jsonText) {
  json j;
  try {
    j = json::parse(jsonText);
  } catch (const std::exception& e) {
    return Status::error(std::string("training section: ") + e.what());
  }
  TrainingConfig c;
  const std::string root = "/training";
  Fields r(j, root);
  r.get("batch_size", c.batchSize);
  r.get("epochs", c.epochs);
  r.get("seed", c.seed);
  r.get("shuffle", c.shuffle);
  r.get("accumulation_steps", c.accumulationSteps);
  // The device when no Accelerator node says (the studio's Accelerator box).
  r.get("accelerator", c.accelerator);
  if (const json* d = r.sub("dataset")) {
    Fields rd(*d, root + "/dataset");
    DW_RETURN_IF_ERROR(parseFiles(rd.sub("train"), root + "/dataset/train", c.dataset.train));
    DW_RETURN_IF_ERROR(
        parseFiles(rd.sub("validation"), root + "/dataset/validation", c.dataset.validation));
    DW_RETURN_IF_ERROR(parseFiles(rd.sub("test"), root + "/dataset/test", c.dataset.test));
    rd.get("validation_split", c.dataset.validationSplit);
    rd.get("test_split", c.dataset.testSplit);
    rd.get("train_limit", c.dataset.trainLimit);
    DW_RETURN_IF_ERROR(rd.check());
  }
  if (const json* o = r.sub("optimizer"))
    DW_RETURN_IF_ERROR(parseOptimizer(*o, root + "/optimizer", c.optimizer));
  DW_RETURN_IF_ERROR(r.check());
  if (c.batchSize < 1) return Status::error(root + "/batch_size: must be >= 1");
  if (c.epochs < 0) return Status::error(root + "/epochs: must be >= 0");
  if (c.accumulationSteps < 1) return Status::error(root + "/accumulation_steps: must be >= 1");
  if (c.dataset.validationSplit < 0 || c.dataset.validationSplit >= 1)
    return Status::error(root + "/dataset/validation_split: must be in [0, 1)");
  if (c.dataset.testSplit < 0 || c.dataset.validationSplit + c.dataset.testSplit >= 1)
    return Status::error(root +
                         "/dataset/test_split: must be >= 0, and with validation_split under 1");
  if (c.dataset.trainLimit < 0)
    return Status::error(root + "/dataset/train_limit: must be >= 0 (0 = every sample)");
  return c;
}

void rebaseDataPaths(Graph& graph, const std::string& fromDir, const std::string& toDir) {
  namespace fs = std::filesystem;
  auto it = graph.info().sections.find("training");
  if (it == graph.info().sections.end()) return;
  const fs::path from = fs::absolute(fromDir.empty() ? "." : fromDir).lexically_normal();
  const fs::path to = fs::absolute(toDir.empty() ? "." : toDir).lexically_normal();
  if (from == to) return;
  json j = json::parse(it->second, nullptr, false);
  if (!j.is_object() || !j.contains("dataset") || !j["dataset"].is_object()) return;
  bool changed = false;
  json& dataset = j["dataset"];
  for (const char* split : {"train", "validation", "test"}) {
    auto files = dataset.find(split);  // operator[] would add a null split
    if (files == dataset.end() || !files->is_array()) continue;
    for (json& f : *files) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string()) continue;
      const fs::path p = f["path"].get<std::string>();
      if (p.empty() || p.is_absolute()) continue;
      const fs::path absolute = (from / p).lexically_normal();
      const fs::path relative = absolute.lexically_relative(to);
      f["path"] = (relative.empty() ? absolute : relative).string();
      changed = true;
    }
  }
  if (!changed) return;
  ModelInfo info = graph.info();
  info.sections["training"] = j.dump(1);
  graph.setInfo(std::move(info));
}

Result<TrainingConfig> trainingConfigFromGraph(const Graph& graph) {
  auto it = graph.info().sections.find("training");
  TrainingConfig c;
  if (it != graph.info().sections.end()) {
    auto parsed = parseTrainingConfig(it->second);
    if (!parsed) return parsed.status();
    c = std::move(parsed.value());
  }
  applyAcceleratorNode(graph, c);
  return c;
}

const Node* controlNode(const Graph& graph, const std::string& type) {
  const Node* found = nullptr;
  for (const auto& [id, n] : graph.nodes())
    if (n.type == type && n.domain == kGraphDomain &&
        (!found || (n.model.empty() && !found->model.empty())))
      found = &n;
  return found;
}

void applyAcceleratorNode(const Graph& graph, TrainingConfig& c) {
  const Node* acc = controlNode(graph, "Accelerator");
  if (!acc) return;
  if (auto v = graph.param(acc->id, "device")) c.accelerator = v->asString();
  if (auto v = graph.param(acc->id, "threads")) c.threads = static_cast<int>(v->asInt());
  if (auto v = graph.param(acc->id, "precision")) c.precision = v->asString();
}

bool evalStepResetsMetrics(const Graph& graph) {
  const Node* step = controlNode(graph, "Eval Step");
  if (!step) return false;
  auto v = graph.param(step->id, "reset_metrics?");
  return v && v->asBool();
}

std::string trainingConfigToJson(const TrainingConfig& c) {
  json j;
  if (c.accelerator != TrainingConfig().accelerator) j["accelerator"] = c.accelerator;
  json d;
  for (const auto& f : c.dataset.train) d["train"].push_back(fileToJson(f));
  for (const auto& f : c.dataset.validation) d["validation"].push_back(fileToJson(f));
  for (const auto& f : c.dataset.test) d["test"].push_back(fileToJson(f));
  if (c.dataset.validationSplit > 0) d["validation_split"] = c.dataset.validationSplit;
  if (c.dataset.testSplit > 0) d["test_split"] = c.dataset.testSplit;
  if (c.dataset.trainLimit > 0) d["train_limit"] = c.dataset.trainLimit;
  if (!d.is_null()) j["dataset"] = d;
  const OptimizerConfig& o = c.optimizer;
  json oj = {{"type", o.type}, {"lr", o.lr}};
  const OptimizerConfig def;
  if (o.momentum != def.momentum) oj["momentum"] = o.momentum;
  if (o.dampening != def.dampening) oj["dampening"] = o.dampening;
  if (o.nesterov) oj["nesterov"] = true;
  if (o.beta1 != def.beta1) oj["beta1"] = o.beta1;
  if (o.beta2 != def.beta2) oj["beta2"] = o.beta2;
  if (o.eps != def.eps) oj["eps"] = o.eps;
  if (o.weightDecay != def.weightDecay) oj["weight_decay"] = o.weightDecay;
  if (o.adamwMode != def.adamwMode) oj["adamw_mode"] = o.adamwMode;
  if (o.amsgrad) oj["amsgrad"] = true;
  if (o.alpha != def.alpha) oj["alpha"] = o.alpha;
  if (o.centered) oj["centered"] = true;
  if (o.lrDecay != def.lrDecay) oj["lr_decay"] = o.lrDecay;
  if (o.initialAccumulator != def.initialAccumulator)
    oj["initial_accumulator"] = o.initialAccumulator;
  if (o.clipNorm > 0) {
    oj["clip_norm"] = o.clipNorm;
    if (std::isinf(o.clipNormType))
      oj["clip_norm_type"] = "inf";
    else
      oj["clip_norm_type"] = o.clipNormType;
  }
  if (o.schedule.type != "constant") {
    const ScheduleConfig& s = o.schedule;
    oj["schedule"] = {{"type", s.type},
                      {"step_size", s.stepSize},
                      {"gamma", s.gamma},
                      {"warmup_steps", s.warmupSteps},
                      {"total_steps", s.totalSteps},
                      {"min_lr", s.minLr}};
  }
  j["optimizer"] = oj;
  j["batch_size"] = c.batchSize;
  j["epochs"] = c.epochs;
  j["seed"] = c.seed;
  j["shuffle"] = c.shuffle;
  if (c.accumulationSteps != 1) j["accumulation_steps"] = c.accumulationSteps;
  return j.dump(1);
}

json configJson(const OptimizerConfig& o) {
  TrainingConfig c;
  c.optimizer = o;
  return json::parse(trainingConfigToJson(c))["optimizer"];
}

}  // namespace dw::engine::training
