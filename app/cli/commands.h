// The `deepwire` command is assembled from groups of subcommands, one file per group.
// Each register function adds its subcommands to `app`; a subcommand's callback stores its process
// exit code in `exitCode` (0 success, 1 invalid input or failed check, 2 usage or I/O error).
#pragma once

#include <CLI/CLI.hpp>

namespace dw::cli {

void registerCatalogueCommands(CLI::App& app, int& exitCode);  // nodes, describe
void registerGraphCommands(CLI::App& app, int& exitCode);      // export, import, check
void registerEngineCommands(CLI::App& app, int& exitCode);     // run, devices, conformance
void registerTrainingCommands(CLI::App& app, int& exitCode);   // train, eval

}  // namespace dw::cli
