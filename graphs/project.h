// Project files (*.dwproj): versioned JSON that holds a Graph exactly, layout included.
// Loading reports problems with the JSON path (/nodes/3/params/alpha) or the line and column of a
// syntax error, and never modifies the file; saving is atomic.
#pragma once

#include <string>

#include "graphs/graph.h"

namespace dw {

// The newest format this build reads. 2 adds layers' stored trained weights ("weights" in a
// node); a project without them is written as format 1.
inline constexpr int kProjectFormatVersion = 2;

std::string projectToJsonText(const Graph& graph);
// `source` names the origin in messages (a path, or "<memory>").
Result<Graph> projectFromJsonText(const std::string& text, const std::string& source);

Status saveProject(const Graph& graph, const std::string& path);
Result<Graph> loadProject(const std::string& path);

}  // namespace dw
