// deepwire train / eval: filled in by the training engine (issue 4).
#include "app/cli/commands.h"

namespace dw::cli {

void registerTrainingCommands(CLI::App& app, int& exitCode) {
  (void)app;
  (void)exitCode;
}

}  // namespace dw::cli
