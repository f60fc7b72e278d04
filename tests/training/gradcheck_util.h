// Finite-difference checking of a gradient graph (engine/training/autodiff.h): shared by the
// op-level check (gradcheck_test.cpp) and the per-layer check (layer_gradcheck_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "engine/tensor.h"
#include "engine/training/autodiff.h"

namespace dw::engine::training::test {

// out = ReduceSum(y * r) with keepdims 0: with r random, a scalar loss term whose gradient with
// respect to y is r. `prefix` names the two nodes and the product.
inline void addWeightedSum(onnx::GraphProto* g, const std::string& y, const std::string& r,
                           const std::string& out, const std::string& prefix) {
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->set_name(prefix + "mul");
  mul->add_input(y);
  mul->add_input(r);
  mul->add_output(prefix + "weighted");
  auto* sum = g->add_node();
  sum->set_op_type("ReduceSum");
  sum->set_name(prefix + "sum");
  sum->add_input(prefix + "weighted");
  sum->add_output(out);
  auto* kd = sum->add_attribute();
  kd->set_name("keepdims");
  kd->set_type(onnx::AttributeProto::INT);
  kd->set_i(0);
}

// The graph output "loss": a scalar of element type `type`.
inline void addLossOutput(onnx::GraphProto* g, int32_t type) {
  auto* out = g->add_output();
  out->set_name("loss");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  out->mutable_type()->mutable_tensor_type()->mutable_shape();
}

struct FdTolerance {
  double h;     // step of the central difference
  double atol;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol;
  int maxPerTensor = 0;  // 0: every element; else a fixed-seed sample of that many
  // atol is multiplied by max(|gradient|, 0.05) of each tensor: float32 checks of layers whose
  // gradients are small everywhere (pooling divides by the window) stay meaningful.
  bool atolScalesWithGradient = false;
  uint32_t seed = 99;
};

// float64 kernels allow tight checks; float32 needs a larger step (rounding of the loss) and
// looser tolerances.
inline FdTolerance fdTolerance(bool dbl) {
  return dbl ? FdTolerance{1e-6, 1e-6, 1e-5} : FdTolerance{1e-2, 2e-2, 2e-2};
}

// A model of one default-domain node `op` (named `nodeName`) at `opset`; returns the node so
// the caller adds its inputs, attributes and the loss around it.
inline onnx::NodeProto* singleOpModel(onnx::ModelProto& m, int64_t opset, const std::string& graph,
                                      const std::string& op, const std::string& nodeName) {
  m.set_ir_version(8);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  m.mutable_graph()->set_name(graph);
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(nodeName);
  return n;
}

// An initializer of an ONNX elem type from doubles (int32_data holds int32 and bools; other
// integer types go to int64_data).
inline onnx::TensorProto makeTensor(const std::string& name, int32_t type,
                                    const std::vector<int64_t>& shape,
                                    const std::vector<double>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : shape) t.add_dims(d);
  for (double x : v) {
    if (type == onnx::TensorProto::DOUBLE)
      t.add_double_data(x);
    else if (type == onnx::TensorProto::FLOAT)
      t.add_float_data(static_cast<float>(x));
    else if (type == onnx::TensorProto::BOOL)
      t.add_int32_data(x != 0);
    else if (type == onnx::TensorProto::INT32)
      t.add_int32_data(static_cast<int32_t>(x));
    else
      t.add_int64_data(static_cast<int64_t>(x));
  }
  return t;
}

// Feeds for every graph input of the gradient graph that is an initializer of `forward` (the
// trainable weights moved to inputs), plus `extra` (data inputs).
inline std::map<std::string, Tensor> initializerFeeds(const onnx::ModelProto& forward,
                                                      const GradientGraph& gg,
                                                      std::map<std::string, Tensor> extra = {}) {
  for (const auto& init : forward.graph().initializer())
    for (const auto& in : gg.model.graph().input())
      if (in.name() == init.name()) {
        auto t = tensorFromProto(init);
        EXPECT_TRUE(t.ok()) << init.name() << ": " << t.message();
        if (t.ok()) extra[init.name()] = *t;
      }
  return extra;
}

// Runs the gradient graph once, then compares "<w>_grad" for every w in `wrt` (fed names; their
// gradient outputs are gg.gradOutputs in order, or `gradNames` when given) with central
// differences of output `loss`. Returns how many elements were compared.
inline int checkFiniteDifferences(InferenceSession& session, const GradientGraph& gg,
                                  std::map<std::string, Tensor> feeds,
                                  const std::vector<std::string>& wrt,
                                  const std::vector<std::string>& gradNames,
                                  const std::string& loss, const FdTolerance& tol,
                                  const std::string& what) {
  auto base = session.run(feeds);
  EXPECT_TRUE(base.ok()) << what << ": " << base.message();
  if (!base.ok()) return 0;
  auto lossAt = [&](std::map<std::string, Tensor>& f) {
    auto r = session.run(f);
    EXPECT_TRUE(r.ok()) << what << ": " << r.message();
    return r.ok() ? r->at(loss).getDouble(0) : 0.0;
  };
  std::mt19937 rng(tol.seed);
  int checked = 0;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const std::string& w = wrt[k];
    const std::string& gname = gradNames.empty() ? gg.gradOutputs.at(k) : gradNames.at(k);
    auto git = base->find(gname);
    EXPECT_NE(git, base->end()) << what << ": no gradient output " << gname;
    if (git == base->end()) continue;
    const Tensor g = git->second.clone();
    const Tensor orig = feeds.at(w);
    EXPECT_EQ(g.shape(), orig.shape()) << what << ": gradient of " << w;
    if (g.shape() != orig.shape()) continue;
    double atol = tol.atol;
    if (tol.atolScalesWithGradient) {
      double m = 0.05;
      for (int64_t i = 0; i < g.size(); ++i) m = std::max(m, std::abs(g.getDouble(i)));
      atol *= m;
    }
    std::vector<int64_t> idx(orig.size());
    std::iota(idx.begin(), idx.end(), 0);
    if (tol.maxPerTensor > 0 && orig.size() > tol.maxPerTensor) {
      // Half the sample from elements with a nonzero analytic gradient, so sparse gradients
      // (max pooling) are checked where they matter, not only where they are zero.
      std::shuffle(idx.begin(), idx.end(), rng);
      std::vector<int64_t> nonzero, rest;
      for (int64_t i : idx) (g.getDouble(i) != 0 ? nonzero : rest).push_back(i);
      const size_t half = std::min<size_t>(nonzero.size(), tol.maxPerTensor / 2);
      std::vector<int64_t> pick(nonzero.begin(), nonzero.begin() + half);
      for (int64_t i : rest)
        if (pick.size() < static_cast<size_t>(tol.maxPerTensor)) pick.push_back(i);
      for (size_t k = half;
           k < nonzero.size() && pick.size() < static_cast<size_t>(tol.maxPerTensor); ++k)
        pick.push_back(nonzero[k]);
      idx = std::move(pick);
    }
    for (int64_t i : idx) {
      auto perturbed = [&](double delta) {
        Tensor t = orig.clone();
        if (t.dtype() == DType::kDouble)
          t.data<double>()[i] += delta;
        else
          t.data<float>()[i] += static_cast<float>(delta);
        feeds[w] = t;
        double l = lossAt(feeds);
        feeds[w] = orig;
        return l;
      };
      const double num = (perturbed(tol.h) - perturbed(-tol.h)) / (2 * tol.h);
      const double ana = g.getDouble(i);
      EXPECT_NEAR(ana, num, atol + tol.rtol * std::abs(num))
          << what << ": d " << loss << " / d " << w << "[" << i << "]";
      ++checked;
    }
  }
  return checked;
}

}  // namespace dw::engine::training::test
