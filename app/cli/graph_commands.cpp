// deepwire export / import / check: project and ONNX files.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "app/cli/cli_util.h"
#include "app/cli/commands.h"
#include "engine/function_inline.h"
#include "engine/training/data_source.h"
#include "engine/training/trainer.h"
#include "graphs/file_io.h"
#include "graphs/onnx_export.h"
#include "graphs/onnx_import.h"
#include "graphs/project.h"
#include "graphs/tensor_data.h"
#include "nodes/schema_facts.h"
#include "nodes/type_syntax.h"

namespace dw::cli {

namespace {

void printModelSummary(const onnx::ModelProto& m, const std::string& path) {
  int64_t params = 0, bytes = 0;
  for (const auto& t : m.graph().initializer()) {
    params += elementCount(t);
    bytes += static_cast<int64_t>(t.raw_data().size());
  }
  std::string opset;
  for (const auto& o : m.opset_import())
    opset += (opset.empty() ? "" : ", ") +
             (o.domain().empty() ? std::string("ai.onnx") : o.domain()) + " " +
             std::to_string(o.version());
  const auto& g = m.graph();
  std::cout << "  " << count(g.node_size(), "node", "nodes") << ", "
            << count(g.input_size(), "input", "inputs") << ", "
            << count(g.output_size(), "output", "outputs") << ", "
            << count(g.initializer_size(), "initializer", "initializers") << " ("
            << count(params, "parameter", "parameters") << ", " << humanBytes(double(bytes))
            << ")\n"
            << "  opset: " << opset << ", IR version " << m.ir_version() << "\n";
  // With their types: an export with the data conversion takes the data as stored (uint8
  // pixels where the model takes floats), which a trial found only by feeding it the wrong one.
  auto typed = [](const onnx::ValueInfoProto& v) {
    return v.has_type() ? v.name() + ": " + formatType(v.type()) : v.name();
  };
  for (const auto& in : m.graph().input()) std::cout << "  input  " << typed(in) << "\n";
  for (const auto& out : m.graph().output()) std::cout << "  output " << typed(out) << "\n";
  std::cout << "  written to " << std::filesystem::absolute(path).string() << "\n";
}

// Labels outside a classification loss's classes, which `train` refuses before its first step:
// every label source is read whole (labels are small) and checked against the class count
// that shape inference gives the loss's scores.
void checkLabelSources(const onnx::ModelProto& exported,
                       const dw::engine::training::TrainingConfig& cfg, const std::string& dir,
                       const std::vector<dw::engine::training::DataInput>& wanted,
                       std::vector<std::string>& problems) {
  namespace training = dw::engine::training;
  onnx::ModelProto m = exported;
  if (!inferShapesSafely(m, false, 0, false).ok()) return;  // the checks before report it
  std::map<std::string, const onnx::TypeProto*> types;
  for (const auto* list : {&m.graph().value_info(), &m.graph().output(), &m.graph().input()})
    for (const auto& v : *list) types[v.name()] = &v.type();
  std::vector<std::string> names;
  for (const auto& in : wanted) names.push_back(in.name);
  const auto ranges = training::labelRangesOf(m.graph(), types, names);
  if (ranges.empty()) return;
  for (auto [split, files] : {std::pair{"train", &cfg.dataset.train},
                              {"validation", &cfg.dataset.validation},
                              {"test", &cfg.dataset.test}})
    for (size_t i = 0; i < files->size(); ++i) {
      const training::DataFileSpec& f = (*files)[i];
      if (std::none_of(ranges.begin(), ranges.end(),
                       [&](const auto& r) { return r.input == f.input; }))
        continue;
      std::error_code ec;
      if (!std::filesystem::exists(training::resolvePath(f.path, dir), ec)) continue;
      auto data = training::loadDataset({f}, dir);
      if (!data.ok()) continue;  // inspectSource's problem, reported above
      const std::string where = std::string("/training/dataset/") + split + "/" +
                                std::to_string(i) + " (" +
                                std::filesystem::path(f.path).filename().string() + ")";
      if (Status st = training::checkLabelValues(ranges, data->columns, where); !st.ok())
        problems.push_back(st.message());
    }
}

// What `train` would refuse at once about the training section: its keys, and each data source's
// file and the input it feeds (the data itself is read by train and eval).
void checkTrainingSection(const Graph& g, const std::string& path,
                          std::vector<std::string>& problems) {
  namespace training = dw::engine::training;
  auto cfg = training::trainingConfigFromGraph(g);
  if (!cfg.ok()) {
    problems.push_back(cfg.message());
    return;
  }
  ExportOptions opt;
  opt.withLosses = true;
  auto m = exportOnnx(g, opt);
  if (!m.ok()) return;  // reported by the checks before
  std::set<std::string> inputs;
  for (const auto& in : m->graph().input()) inputs.insert(in.name());
  std::string known;
  for (const auto& n : inputs) known += (known.empty() ? "" : ", ") + n;
  const std::string dir = std::filesystem::absolute(path).parent_path().string();
  // What training feeds: the graph's data inputs (model inputs and the targets of its losses).
  auto wanted = training::dataInputsOf(g);
  std::map<std::string, training::DataInput> dataInputs;
  std::map<std::string, std::string> fitsInTrain;  // input -> its train file, where that fits
  if (wanted.ok())
    for (const auto& in : *wanted) dataInputs[in.name] = in;
  for (auto [split, files] : {std::pair{"train", &cfg->dataset.train},
                              {"validation", &cfg->dataset.validation},
                              {"test", &cfg->dataset.test}}) {
    const bool train = std::string(split) == "train";
    // Samples per source of the split (input, file, count): they must agree.
    std::vector<std::tuple<std::string, std::string, int64_t>> counts;
    for (size_t i = 0; i < files->size(); ++i) {
      const training::DataFileSpec& f = (*files)[i];
      const std::string where = std::string("/training/dataset/") + split + "/" + std::to_string(i);
      std::error_code ec;
      const std::string file = training::resolvePath(f.path, dir);
      const bool exists = std::filesystem::exists(file, ec);
      if (!exists)
        problems.push_back(where + "/path: " + file +
                           " does not exist (a relative path is read from the project's folder)");
      if (!f.input.empty() && !inputs.count(f.input))
        problems.push_back(where + "/input: '" + f.input +
                           "' is not an input of the model (its inputs: " + known + ")");
      // The data as converted must fit the input it feeds, in every split: a test source that
      // does not was found only by the evaluation at the end of the first epoch.
      auto in = dataInputs.find(f.input);
      if (!exists || in == dataInputs.end()) continue;
      auto summary = training::inspectSource(f, dir);
      if (!summary.ok()) {
        problems.push_back(where + ": " + summary.message());
        continue;
      }
      counts.emplace_back(f.input, std::filesystem::path(file).filename().string(),
                          summary->samples);
      std::string misfit = training::checkFit(*summary, f, in->second);
      if (misfit.empty()) {
        if (train) fitsInTrain[f.input] = file;
        continue;
      }
      // In another split, with the input's train source fitting, the file is the odd one out:
      // changing the Input, which checkFit would suggest, would break the train source.
      const std::string takes = " takes " + in->second.typeText;
      const auto trained = fitsInTrain.find(f.input);
      const size_t cut = misfit.find(takes);
      if (!train && trained != fitsInTrain.end() && cut != std::string::npos)
        misfit = misfit.substr(0, cut + takes.size()) + ": the train source " +
                 std::filesystem::path(trained->second).filename().string() +
                 " fits it, so this file is the odd one; choose the " + split +
                 " file that holds what that one holds";
      problems.push_back(where + ": " + misfit);
    }
    for (size_t k = 1; k < counts.size(); ++k)
      if (std::get<2>(counts[k]) != std::get<2>(counts[0])) {
        problems.push_back(std::string("/training/dataset/") + split + ": '" +
                           std::get<0>(counts[k]) + "' has " +
                           std::to_string(std::get<2>(counts[k])) + " samples (" +
                           std::get<1>(counts[k]) + ") but '" + std::get<0>(counts[0]) + "' has " +
                           std::to_string(std::get<2>(counts[0])) + " (" + std::get<1>(counts[0]) +
                           "); every source of a split needs one "
                           "sample for each of the others'");
        break;
      }
    // A split with sources of its own needs one for every data input, as train does.
    if (!train && !files->empty())
      for (const auto& [name, in] : dataInputs)
        if (std::none_of(files->begin(), files->end(),
                         [&](const auto& f) { return f.input == name; }))
          problems.push_back(std::string("/training/dataset/") + split +
                             ": nothing feeds the graph input '" + name + "' (" + in.typeText +
                             ") in this split; a split with sources of its own needs one for "
                             "every data input (or use a fraction of train instead)");
  }
  checkLabelSources(*m, *cfg, dir, wanted.ok() ? *wanted : std::vector<training::DataInput>{},
                    problems);
  // A split file scaled as its train file is while stored otherwise: train refuses it.
  if (Status st = training::checkSplitScaling(cfg->dataset, dir); !st.ok())
    problems.push_back(st.message());
  // A data input no train source feeds (an Input renamed after its data was chosen) fails the
  // first batch; said here, with the names there are.
  if (!cfg->dataset.train.empty())
    for (const auto& [name, in] : dataInputs) {
      const bool fed = std::any_of(cfg->dataset.train.begin(), cfg->dataset.train.end(),
                                   [&](const auto& f) { return f.input == name; });
      if (fed) continue;
      std::string named;
      for (const auto& f : cfg->dataset.train)
        if (!dataInputs.count(f.input))
          named += (named.empty() ? "" : ", ") + ("'" + f.input + "'");
      problems.push_back("/training/dataset/train: nothing feeds the graph input '" + name + "' (" +
                         in.typeText + "); give it a train source" +
                         (named.empty() ? std::string(" (the studio's Data panel)")
                                        : "; the sources name " + named +
                                              ", which the graph does not have: was the "
                                              "Input renamed?"));
    }
}

// What `import --loss` adds to make an imported model trainable from the command line (what
// the studio's Output Train node, label Input and Data panel give): a trial had to edit the
// project's JSON by hand.
struct TrainingSetup {
  std::string loss, metric, labels, output;
  bool fromLogits = false;
  std::vector<std::string> train, test;  // INPUT=PATH
  double validationSplit = 0;
};

// The project's Output `name` (or its only one) becomes an Output Train with `loss`, fed by a
// new label Input (int64[N] for the sparse losses, else the prediction's type), with `metric`
// beside it; each INPUT=PATH source gets the conversion the Data panel would propose.
Status addTraining(Graph& g, const TrainingSetup& t, const std::string& baseDir,
                   std::vector<std::string>& notes) {
  using namespace dw::engine::training;
  std::vector<NodeId> outputs;
  for (const auto& [id, n] : g.nodes())
    if (n.domain == kGraphDomain && n.type == "Output" && (t.output.empty() || n.name == t.output))
      outputs.push_back(id);
  if (outputs.size() != 1) {
    std::string names;
    for (const auto& [id, n] : g.nodes())
      if (n.domain == kGraphDomain && n.type == "Output")
        names += (names.empty() ? "'" : ", '") + n.name + "'";
    return Status::error(outputs.empty()
                             ? "--output-name: the model has no output named '" + t.output +
                                   "'; its outputs: " + names
                             : "the model has several outputs (" + names +
                                   "); name the one the loss scores with --output-name");
  }
  const Node out = *g.node(outputs[0]);
  const auto from = g.inputLink(out.id, 0);
  if (!from) return Status::error(g.describe(out.id) + " is not wired to anything");
  const std::string predType = g.param(out.id, "type") ? g.param(out.id, "type")->asString() : "";
  DW_RETURN_IF_ERROR(g.removeNode(out.id));
  // In the Output's place, under its id: the export orders outputs by id, and a model with two
  // outputs exported them swapped (a caller reading them by position mixed them up).
  Node replacement;
  replacement.id = out.id;
  replacement.domain = kLayersDomain;
  replacement.type = "Output Train";
  replacement.position = out.position;
  replacement.name = out.name;
  DW_RETURN_IF_ERROR(g.insertNode(std::move(replacement)));
  const NodeId train = out.id;
  DW_RETURN_IF_ERROR(g.setParam(train, "loss", Param::makeString(t.loss)).withContext("--loss"));
  if (t.fromLogits)
    DW_RETURN_IF_ERROR(
        g.setParam(train, "from_logits", Param::makeBool(true)).withContext("--from-logits"));
  DW_RETURN_IF_ERROR(g.addLink({from->from, {train, 0}}));
  // The prediction's type with a free batch: the target of a loss that compares values.
  std::string labelType = !t.labels.empty() ? t.labels
                          : t.loss.rfind("Sparse", 0) == 0 || predType.empty()
                              ? "int64[N]"
                              : withFreeBatch(predType);
  // Class indices of more than one a sample (a tagger's [N, T] for its [N, T, classes]) take
  // the label file's shape: int64[N] failed with "the target rank 1", with no word of --labels.
  if (t.labels.empty() && t.loss.rfind("Sparse", 0) == 0)
    for (const std::string& pair : t.train)
      if (pair.rfind("label=", 0) == 0 && (pair.ends_with(".npy") || pair.ends_with(".pb"))) {
        DataFileSpec probe;  // an array file (a table's label column is one value a row)
        probe.input = "label";
        probe.path = pair.substr(6);
        if (auto stored = storedType(probe, ""); stored.ok() && stored->sampleShape.size() >= 1 &&
                                                 stored->sampleShape != std::vector<int64_t>{1})
          labelType = inputTypeText(engine::DType::kInt64, stored->sampleShape);
      }
  auto label = g.addNode(kGraphDomain, "Input", {out.position.x, out.position.y + 160});
  if (!label) return label.status();
  DW_RETURN_IF_ERROR(g.rename(*label, "label"));
  DW_RETURN_IF_ERROR(
      g.setParam(*label, "type", Param::makeString(labelType)).withContext("--labels"));
  DW_RETURN_IF_ERROR(g.addLink({{*label, 0}, {train, 1}}));
  if (!t.metric.empty()) {
    auto metric = g.addNode(kMetricsDomain, t.metric, {out.position.x, out.position.y + 320});
    if (!metric) return metric.status().withContext("--metric");
    // Metrics take probabilities, as in Keras: from logits they get the loss's own squashing
    // first (a trial's BinaryAccuracy, Precision and Recall thresholded raw logits at 0.5).
    PortRef scored = from->from;
    if (t.fromLogits) {
      const bool binary = t.loss.find("Binary") != std::string::npos;
      const bool categorical = t.loss.find("Categorical") != std::string::npos;
      if (binary || categorical) {
        auto squash = g.addNode(kLayersDomain, binary ? "Sigmoid" : "SoftMax",
                                {out.position.x - 200, out.position.y + 320});
        if (!squash) return squash.status();
        DW_RETURN_IF_ERROR(
            g.rename(*squash, g.uniqueName(binary ? "probabilities" : "class_probabilities")));
        DW_RETURN_IF_ERROR(g.addLink({from->from, {*squash, 0}}));
        scored = {*squash, 0};
        notes.push_back("--metric " + t.metric + " reads " + (binary ? "sigmoid" : "softmax") +
                        " of the logits, as the loss does");
      }
    }
    // Named after its type, so that train --json reports it under a name a script can use.
    DW_RETURN_IF_ERROR(g.rename(*metric, g.uniqueName(snakeCase(t.metric))));
    DW_RETURN_IF_ERROR(g.addLink({scored, {*metric, 0}}));
    DW_RETURN_IF_ERROR(g.addLink({{*label, 0}, {*metric, 1}}));
  }
  TrainingConfig config;
  if (auto c = trainingConfigFromGraph(g); c.ok()) config = *c;
  config.dataset.validationSplit = t.validationSplit;
  auto inputs = dataInputsOf(g);
  if (!inputs) return inputs.status();
  for (auto [sources, files, split] : {std::tuple{&t.train, &config.dataset.train, "--data"},
                                       std::tuple{&t.test, &config.dataset.test, "--test-data"}}) {
    for (const std::string& pair : *sources) {
      const size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size())
        return Status::error(std::string(split) + " '" + pair +
                             "': give INPUT=PATH, e.g. image=train-images-idx3-ubyte.gz");
      DataFileSpec f;
      f.input = pair.substr(0, eq);
      // A path on the command line is the shell's, from the current folder; the project keeps
      // it relative to its own folder, as the studio does (a trial's `--data x=d/x.npy` was
      // looked for next to the project).
      const std::filesystem::path given = pair.substr(eq + 1);
      f.path = given.string();
      if (given.is_relative()) {
        const auto absolute = std::filesystem::absolute(given).lexically_normal();
        const auto fromProject = absolute.lexically_relative(baseDir);
        f.path = (fromProject.empty() ? absolute : fromProject).string();
      }
      const auto in = std::find_if(inputs->begin(), inputs->end(),
                                   [&](const DataInput& d) { return d.name == f.input; });
      if (in == inputs->end()) {
        std::string names;
        for (const auto& d : *inputs) names += " '" + d.name + "'";
        return Status::error(std::string(split) + ": the model has no data input '" + f.input +
                             "'; its data inputs:" + names);
      }
      // A test file is read with its input's train conversion, as the studio reads it.
      for (const DataFileSpec& trained : config.dataset.train)
        if (files != &config.dataset.train && trained.input == f.input) {
          const std::string path = f.path;
          f = trained;
          f.path = path;
          f.format.clear();
          f.storedDtype.clear();
          f.storedShape.clear();
        }
      if (files == &config.dataset.train) {
        // A table given to several inputs: its label column goes to the label input, the
        // others to the rest, as the studio guesses (a trial's table fed its label column to
        // the features and its features to the label).
        const std::string path = resolvePath(f.path, baseDir);
        if (auto format = detectFormat(path);
            format.ok() && *format == "csv" && f.csvLabelColumn.empty())
          if (auto header = readCsvHeader(path); header.ok())
            guessCsvLabel(f, header->csvColumns, *in);
        auto summary = inspectSource(f, baseDir);
        if (!summary) return summary.status().withContext(split);
        const Proposal p = proposeConversion(*summary, f, *in);
        if (p.fits) f = p.spec;
        notes.push_back("data " + f.input + ": " + p.message);
      }
      files->push_back(f);
    }
  }
  // A model exported with a fixed batch trains only in batches of that size: said now, with the
  // batch size it then needs (training's default is 32).
  for (const DataInput& in : *inputs)
    if (!in.shape.empty() && in.shape[0] > 0) {
      config.batchSize = in.shape[0];
      notes.push_back(
          "input '" + in.name + "' takes batches of exactly " + std::to_string(in.shape[0]) + " (" +
          in.typeText + "): the project trains in batches of " + std::to_string(in.shape[0]) +
          "; to choose another size, set the Input's type to " + withFreeBatch(in.typeText));
      break;
    }
  ModelInfo info = g.info();
  info.sections["training"] = trainingConfigToJson(config);
  g.setInfo(std::move(info));
  return Status();
}

int runCheck(const std::string& path) {
  std::vector<std::string> problems;
  if (isProjectFile(path)) {
    auto g = loadProject(path);
    if (!g.ok()) return fail(g.message());
    for (const auto& p : g->validate()) problems.push_back(p.message);
    // Hints do not make the project invalid: on stderr, so that stdout stays one line per problem.
    for (const auto& h : groupedHints(g->hints()))
      std::cerr << printableText(path + ": hint: " + h) << "\n";
    if (problems.empty()) {
      auto m = exportOnnx(*g);
      if (!m.ok()) problems.push_back(m.message());
    }
    if (problems.empty())
      if (Status st = checkTrainingLowering(*g); !st.ok()) problems.push_back(st.message());
    if (problems.empty()) checkTrainingSection(*g, path, problems);
  } else {
    auto m = readOnnxFile(path);
    if (!m.ok()) return fail(m.message());
    Status st = checkOnnxModel(*m, CheckLevel::Full);
    if (!st.ok()) problems.push_back(st.message());
    // Model-local functions become their bodies, as import makes them.
    auto inlined = engine::inlineLocalFunctions(*m);
    if (!inlined.ok()) return fail(inlined.message());
    auto g = importOnnx(*inlined, path);
    if (!g.ok()) problems.push_back(g.message());
    // What the catalogue knows beyond ONNX's checker (an attribute's allowed values), as the
    // project made of the file would say.
    if (g.ok())
      for (const auto& p : g->validate()) problems.push_back(p.message);
  }
  if (problems.empty()) {
    std::cout << path << ": valid\n";
    return 0;
  }
  // Messages from the importer already start with the file's name.
  // Names from a damaged file may hold bytes that are not UTF-8: printed as U+FFFD, so that a
  // program reading the output as text (Python's text=True) does not fail on it.
  for (const auto& p : problems)
    std::cout << printableText((p.rfind(path + ": ", 0) == 0 ? "" : path + ": ") + p) << "\n";
  std::cerr << "deepwire: " << problems.size() << " problem(s) in " << path << "\n";
  return 1;
}

}  // namespace

Result<onnx::ModelProto> projectAsOnnx(const std::string& path, const ExportOptions& options,
                                       bool withoutConversion) {
  auto g = loadProject(path);
  if (!g.ok()) return g.status();
  auto m = exportOnnx(*g, options);
  if (!m.ok()) return m.status().withContext(path);
  // As the studio's Export ONNX: the model takes the data as its project's sources store it.
  if (withoutConversion) return m;
  auto cfg = dw::engine::training::trainingConfigFromGraph(*g);
  Status cs = cfg.ok()
                  ? dw::engine::training::addDataConversion(
                        *m, cfg->dataset, std::filesystem::absolute(path).parent_path().string())
                  : cfg.status();
  if (!cs.ok()) return cs.withContext(path);
  return m;
}

void registerGraphCommands(CLI::App& app, int& exitCode) {
  {
    auto* cmd = app.add_subcommand("export", "Export a project to an ONNX model");
    auto in = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto model = std::make_shared<std::string>();
    auto check = std::make_shared<std::string>("full");
    cmd->add_option("PROJECT", *in, "Project file (*.dwproj)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("-o,--output", *out, "ONNX file to write")->required();
    cmd->add_option("--model", *model, "Which model of the canvas (default: the default model)");
    cmd->add_option("--check", *check,
                    "full: ONNX checker + strict shape inference (default); basic: checker only; "
                    "none")
        ->check(CLI::IsMember({"full", "basic", "none"}));
    auto noConversion = std::make_shared<bool>(false);
    cmd->add_flag("--no-data-conversion", *noConversion,
                  "Leave out the data conversion (cast, scale, normalization, reshape) that the "
                  "project's training data section puts in front of the inputs");
    cmd->callback([in, out, model, check, noConversion, &exitCode] {
      if (!isProjectFile(*in)) {
        exitCode = fail("export takes a project (*.dwproj), and '" + *in +
                        "' is not one; `deepwire import " + *in +
                        " -o NAME.dwproj` makes a project of an ONNX model");
        return;
      }
      ExportOptions opt;
      opt.model = *model;
      opt.check = *check == "full"    ? CheckLevel::Full
                  : *check == "basic" ? CheckLevel::Basic
                                      : CheckLevel::None;
      auto m = projectAsOnnx(*in, opt, *noConversion);
      if (!m.ok()) {
        exitCode = fail(m.message());
        return;
      }
      Status st = writeOnnxFile(*m, *out);
      if (!st.ok()) {
        exitCode = fail(st.message(), 2);
        return;
      }
      std::cout << "exported " << *in
                << (opt.check == CheckLevel::Full    ? " (validated; passes the ONNX checker with "
                                                       "strict shape inference)\n"
                    : opt.check == CheckLevel::Basic ? " (validated; passes the ONNX checker)\n"
                                                     : " (not checked)\n");
      printModelSummary(*m, *out);
    });
  }
  {
    auto* cmd = app.add_subcommand("import", "Import an ONNX model into a project");
    auto in = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    cmd->add_option("MODEL", *in, "ONNX file")->required()->check(CLI::ExistingFile);
    cmd->add_option("-o,--output", *out, "Project file to write (*.dwproj)")->required();
    auto setup = std::make_shared<TrainingSetup>();
    cmd->add_option("--loss", setup->loss,
                    "Make the model trainable: its output becomes an Output Train with this loss "
                    "(SparseCategoricalCrossentropy, MeanSquaredError...; `deepwire nodes "
                    "--category losses`), scored against a new 'label' input");
    cmd->add_option("--output-name", setup->output,
                    "With --loss: the output the loss scores, where the model has several");
    cmd->add_flag("--from-logits", setup->fromLogits,
                  "With --loss: the output gives raw scores, not probabilities");
    cmd->add_option("--labels", setup->labels,
                    "With --loss: the label input's type (default int64[N] for the sparse "
                    "losses, else the output's type)");
    cmd->add_option("--metric", setup->metric,
                    "With --loss: a metric beside it, e.g. SparseCategoricalAccuracy");
    cmd->add_option("--data", setup->train,
                    "With --loss: a training source INPUT=PATH (IDX, NPY, CSV or an image "
                    "folder), converted to what the input takes as the studio's Data panel "
                    "proposes; repeat per input, 'label' included")
        ->type_name("INPUT=PATH");
    cmd->add_option("--test-data", setup->test, "With --loss: a test source INPUT=PATH")
        ->type_name("INPUT=PATH");
    cmd->add_option("--validation-split", setup->validationSplit,
                    "With --loss: the fraction of the training data held out for validation")
        ->check(CLI::Range(0.0, 0.99));
    cmd->callback([in, out, setup, &exitCode] {
      // A project is JSON: under an .onnx name it would pass for a model, and `-o` naming the
      // model being imported would overwrite it.
      if (!isProjectFile(*out)) {
        exitCode = fail("-o names the project to write, and '" + *out +
                            "' does not end in .dwproj; choose a name such as " +
                            std::filesystem::path(*in).stem().string() + ".dwproj",
                        2);
        return;
      }
      auto m = readOnnxFile(*in);
      if (m.ok()) m = engine::inlineLocalFunctions(*m);  // functions become their bodies
      if (!m.ok()) {
        exitCode = fail(m.message());
        return;
      }
      auto g = importOnnx(*m, *in);
      if (!g.ok()) {
        exitCode = fail(g.message());
        return;
      }
      const bool anySetup = !setup->train.empty() || !setup->test.empty() ||
                            !setup->metric.empty() || setup->fromLogits || !setup->labels.empty() ||
                            !setup->output.empty();
      if (setup->loss.empty() && anySetup) {
        exitCode = fail(
            "--data, --metric and the other training options go with --loss, which "
            "names the loss that makes the model trainable",
            2);
        return;
      }
      std::vector<std::string> dataNotes;
      if (!setup->loss.empty()) {
        const std::string base = std::filesystem::absolute(*out).parent_path().string();
        if (Status st = addTraining(*g, *setup, base, dataNotes); !st.ok()) {
          exitCode = fail(st.message(), 2);
          return;
        }
      }
      // A model ONNX's checker or the project's validation refuses still imports (the studio
      // is where it gets fixed), but not in silence.
      std::vector<std::string> problems;
      if (Status st = checkOnnxModel(*m, CheckLevel::Full); !st.ok())
        problems.push_back(st.message());
      for (const auto& p : g->validate()) problems.push_back(p.message);
      Status st = saveProject(*g, *out);
      if (!st.ok()) {
        exitCode = fail(st.message(), 2);
        return;
      }
      std::cout << "imported " << *in << ": "
                << count(static_cast<int64_t>(g->nodes().size()), "node", "nodes") << ", "
                << count(static_cast<int64_t>(g->links().size()), "link", "links")
                << "\n  written to " << std::filesystem::absolute(*out).string() << "\n";
      constexpr size_t kShown = 5;
      for (size_t i = 0; i < problems.size() && i < kShown; ++i)
        std::cerr << "deepwire: warning: " << problems[i] << "\n";
      if (problems.size() > kShown)
        std::cerr << "deepwire: warning: and " << problems.size() - kShown << " more\n";
      if (!problems.empty())
        std::cerr << "deepwire: warning: the project keeps "
                  << count(static_cast<int64_t>(problems.size()), "problem", "problems")
                  << " of the model; `deepwire check " << *out
                  << "` lists them, and the studio shows them on the nodes\n";
      for (const auto& h : groupedHints(g->hints())) note("hint: " + printableText(h));
      for (const auto& d : dataNotes) note(printableText(d));
      if (!setup->loss.empty())
        std::cout << "  trainable: loss " << setup->loss << " against input 'label'"
                  << (setup->train.empty() ? "; give it data with --data (or the studio's Data "
                                             "panel), then `deepwire train`"
                                           : "; `deepwire train " + *out + "` trains it")
                  << "\n";
    });
  }
  {
    auto* cmd = app.add_subcommand("check", "Validate a project or an ONNX file");
    auto in = std::make_shared<std::string>();
    cmd->add_option("FILE", *in, "*.dwproj or *.onnx")->required()->check(CLI::ExistingFile);
    cmd->callback([in, &exitCode] { exitCode = runCheck(*in); });
  }
}

}  // namespace dw::cli
