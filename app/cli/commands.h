// The `deepwire` command is assembled from groups of subcommands, one file per group.
// Each register function adds its subcommands to `app`; a subcommand's callback stores its process
// exit code in `exitCode` (0 success, 1 invalid input or failed check, 2 usage or I/O error).
#pragma once

#include <onnx/onnx_pb.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "graphs/onnx_export.h"

namespace dw::cli {

inline bool isProjectFile(const std::string& path) {
  return std::filesystem::path(path).extension() == ".dwproj";
}

// A project as the ONNX model `export` writes and `run` runs: with the data conversion (cast,
// scale, normalization, reshape) its training data section puts in front of the inputs, unless
// `withoutConversion`, so that both take the data as the project's sources store it.
Result<onnx::ModelProto> projectAsOnnx(const std::string& path, const ExportOptions& options,
                                       bool withoutConversion);

void registerCatalogueCommands(CLI::App& app, int& exitCode);  // nodes, describe
void registerGraphCommands(CLI::App& app, int& exitCode);      // export, import, check
void registerEngineCommands(CLI::App& app, int& exitCode);     // run, devices, conformance
void registerTrainingCommands(CLI::App& app, int& exitCode);   // train, eval

}  // namespace dw::cli
