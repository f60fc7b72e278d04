// What the engine does with one operator: which kernel tables run it, whether it runs by
// expanding its ONNX function body instead, and whether autodiff differentiates it. The
// catalogue's views read this (deepwire describe, the studio palette's tooltips), and
// tests/engine/op_support_test.cpp holds every catalogue op to it.
#pragma once

#include <string>
#include <vector>

namespace dw::engine {

struct OpSupport {
  // Kernel tables with a kernel for the op at this opset, in the planner's order of preference
  // (kernel.h): cuda (NVIDIA GPUs, builds with CUDA), onednn, reference (plain C++).
  std::vector<std::string> tables;
  bool function = false;  // no kernel, but an ONNX function body the session expands
  bool gradient = false;  // autodiff has a gradient builder for it
  bool runs() const { return !tables.empty() || function; }
  // "cuda (NVIDIA GPUs), onednn, reference (C++)", "expanded into other ops (its ONNX function)"
  // or "no kernel".
  std::string describe() const;
};

// `domain` as the catalogue spells it ("ai.onnx" or "" for the default domain).
OpSupport opSupport(const std::string& domain, const std::string& op, int opset);

}  // namespace dw::engine
