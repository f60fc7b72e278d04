// deepwire: the headless front end. Subcommands live in one file per group (see commands.h).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "engine/openmp_wait.h"

namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// CLI11 lists the arguments it could not place, last first ("1 --epoch" for `--epoch 1`).
// Name the options that are unknown to the subcommand in the order they were typed, each
// with the closest option it has.
std::string unknownOptions(const CLI::App& app, int argc, char** argv) {
  const CLI::App* sub = nullptr;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!sub && a.rfind("-", 0) != 0) {
      for (const CLI::App* s : app.get_subcommands({}))
        if (s->get_name() == a) sub = s;
      continue;
    }
    if (!sub || a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(0, a.find('='));
    std::string best;
    size_t bestDistance = 3;  // at most two edits away, or a prefix of one option
    bool known = false;
    for (const CLI::Option* o : sub->get_options()) {
      for (const std::string& l : o->get_lnames()) {
        const std::string opt = "--" + l;
        if (opt == name) known = true;
        const size_t d = opt.rfind(name, 0) == 0 ? 1 : editDistance(name, opt);
        if (d < bestDistance) bestDistance = d, best = opt;
      }
    }
    if (known) continue;
    out += std::string(out.empty() ? "" : "\ndeepwire: error: ") + name + " is not an option of '" +
           sub->get_name() + "'" + (best.empty() ? "" : "; did you mean " + best + "?");
  }
  return out;
}

// The first word when it names no subcommand ("deepwire tran"), with the closest one; CLI11
// says only that a subcommand is required.
std::string unknownSubcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::string best, names;
  size_t bestDistance = 3;
  for (const CLI::App* s : app.get_subcommands({})) {
    if (s->get_name() == word) return "";
    names += (names.empty() ? "" : ", ") + s->get_name();
    const size_t d = s->get_name().rfind(word, 0) == 0 ? 1 : editDistance(word, s->get_name());
    if (d < bestDistance) bestDistance = d, best = s->get_name();
  }
  return "'" + word + "' is not a deepwire command" +
         (best.empty() ? "" : "; did you mean " + best + "?") + " (commands: " + names + ")";
}

}  // namespace

int main(int argc, char** argv) {
  dw::useShortOpenMpSpin(argv);
  CLI::App app{
      "deepwire: build, check, convert, run and train node-graph deep-learning models.\n"
      "Projects (*.dwproj) and ONNX files (*.onnx) are accepted wherever a model is expected;\n"
      "train and eval need a project, which also names the loss, the optimizer and the data."};
  app.set_version_flag("--version", "deepwire 0.1.0");
  // Usage errors read like every other error (and exit 2, as usage errors do).
  app.failure_message([&](const CLI::App*, const CLI::Error& e) {
    std::string unknown = unknownSubcommand(app, argc, argv);
    if (unknown.empty() && dynamic_cast<const CLI::ExtrasError*>(&e))
      unknown = unknownOptions(app, argc, argv);
    return "deepwire: error: " + (unknown.empty() ? std::string(e.what()) : unknown) +
           "\nRun with --help for more information.\n";
  });
  app.require_subcommand(1);
  int exitCode = 0;
  dw::cli::registerCatalogueCommands(app, exitCode);
  dw::cli::registerGraphCommands(app, exitCode);
  dw::cli::registerEngineCommands(app, exitCode);
  dw::cli::registerTrainingCommands(app, exitCode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // Libraries report errors as Status; anything thrown is a bug, reported rather than a crash.
    std::cerr << "deepwire: internal error: " << e.what() << "\n";
    return 3;
  }
  return exitCode;
}
