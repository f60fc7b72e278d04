// deepwire: the headless front end. Subcommands live in one file per group (see commands.h).
#include <iostream>

#include "app/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "deepwire: build, check, convert, run and train node-graph deep-learning models.\n"
      "Projects (*.dwproj) and ONNX files (*.onnx) are accepted wherever a model is expected;\n"
      "train and eval need a project, which also names the loss, the optimizer and the data."};
  app.set_version_flag("--version", "deepwire 0.1.0");
  // Usage errors read like every other error (and exit 2, as usage errors do).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "deepwire: error: " + std::string(e.what()) +
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
