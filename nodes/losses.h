// Shared by the loss, metric and output domains (losses_domain.cpp, metrics_domain.cpp,
// outputs_domain.cpp): the loss specs, their per-sample functions, and the lowering pieces
// every loss and metric uses (sample weights, reductions, additive metric statistics).
//
// Conventions (Keras'): ports are (prediction, target, sample_weight); the class or feature axis
// is the last one; a "per-sample" value keeps the batch axes and reduces the last one.
#pragma once

#include <string>
#include <vector>

#include "nodes/lowering.h"
#include "nodes/spec.h"

namespace dw {

// A tensor being built, with its rank (the builder only knows the types of a node's inputs).
struct RankedTensor {
  std::string name;
  int64_t rank = 0;
};

// The loss specs of deepwire.losses, in catalogue order. Output Train's parameters and the
// loss-valued metrics of deepwire.metrics are derived from them, so each loss is written once.
const std::vector<NodeSpec>& lossSpecs();

// The per-sample value of loss `type` (no weighting, no reduction). forMetric: the sign Keras'
// metric of the same name uses (CosineSimilarity's metric is +cos, its loss -cos).
using PerSampleLossFn = Result<RankedTensor> (*)(LoweringBuilder&, bool forMetric);
PerSampleLossFn perSampleLoss(const std::string& type);

// --- Spec construction, shared by the three domains ---------------------------------------------
PortSpec lossPort(const std::string& name, const std::string& type, const std::string& doc,
                  PortOption option = PortOption::Single,
                  Differentiability diff = Differentiability::NonDifferentiable);
// A parameter whose type is its default's; a Bool lists false/true as its values.
ParamSpec lossParam(const std::string& name, Param def, const std::string& doc,
                    std::vector<std::string> allowed = {});

// --- Lowering pieces ---------------------------------------------------------------------------
// For losses and metrics that compare the prediction with the target element by element: the
// target must have the prediction's shape. Broadcasting [N,32] against [N] would silently
// compare every output with every label (and fail only when a smaller last batch stops it from
// broadcasting), so a rank or a known dim that differs is an error naming both shapes.
Status sameShapeTarget(LoweringBuilder& b);
// The target's class indices (int64) for a prediction of rank `predRank` whose last axis holds
// the classes: the target has one axis less, or a last axis of 1. Another rank is an error that
// names both ranks, since the usual cause is the prediction (wired before its Dense, say).
Result<std::string> classLabels(LoweringBuilder& b, int64_t predRank);
// A float32 scalar constant.
std::string floatConst(LoweringBuilder& b, float v);
// The element type of input `port` (onnx::TensorProto::DataType), 0 when unknown.
int inputElemType(LoweringBuilder& b, int port);
// Input `port` as float (a Cast when its element type is not float already).
std::string inputAsFloat(LoweringBuilder& b, int port);
// The port named "sample_weight" of the node's spec, if connected; -1 otherwise.
int sampleWeightPort(LoweringBuilder& b);
// The sample weight (float) aligned to a value of rank `rank` as Keras does: a trailing 1 is
// squeezed, missing trailing axes are added. "" when no weight is connected.
Result<std::string> alignedSampleWeight(LoweringBuilder& b, int64_t rank);
// num / den, and 0 where den == 0 (Keras' divide_no_nan).
std::string divNoNan(LoweringBuilder& b, const std::string& num, const std::string& den,
                     const std::string& out = "");
// Keras' Mean metric statistics of `values` (batch axis first): [sum of weighted per-sample
// values, number (or summed weight) of samples]. Non-batch axes are averaged first.
Result<std::vector<std::string>> meanStats(LoweringBuilder& b, const RankedTensor& values);
// total / count, 0 when count is 0: the finalize of every mean-type metric.
Status finalizeMean(LoweringBuilder& b, const std::vector<std::string>& stats);
// Lowers a metric (statistics, then finalize) into output 0.
Status lowerMetric(LoweringBuilder& b);

}  // namespace dw
