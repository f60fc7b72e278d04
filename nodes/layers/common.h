// Internal to nodes/layers/: what the layer families share. Spec construction (ports, typed
// parameters with their defaults, the Keras weight and regularizer parameters, LayerDef and add())
// and lowering helpers (weight fills, Keras activations, int-or-list parameters).
#pragma once

#include <string>
#include <vector>

#include "nodes/catalogue.h"
#include "nodes/lowering.h"

namespace dw::layers {

// --- Spec construction -------------------------------------------------------------------------

PortSpec port(const std::string& name, const std::string& doc,
              PortOption option = PortOption::Single);
PortSpec in(const std::string& doc = "Input tensor.");
PortSpec out(const std::string& doc = "Output tensor.");

ParamSpec pInt(const std::string& name, int64_t def, const std::string& doc);
ParamSpec pFloat(const std::string& name, double def, const std::string& doc);
ParamSpec pBool(const std::string& name, bool def, const std::string& doc);
ParamSpec pStr(const std::string& name, const std::string& def, const std::string& doc,
               std::vector<std::string> allowed = {});
ParamSpec pInts(const std::string& name, std::vector<int64_t> def, const std::string& doc);

ParamSpec activationParam(const std::string& def = "linear");
ParamSpec initParam(const std::string& name, const std::string& def, const std::string& what);
// Keras' <weight>_regularizer parameters, with the l1/l2 coefficients the layer's regularizers
// share. The trainer adds the penalty to the loss (the weights' layout metadata carries it).
std::vector<ParamSpec> regularizerParams(const std::vector<std::string>& weights);
std::vector<ParamSpec> weightParams(bool bias = true);

// The suffix of a layer's type for `nd` spatial axes ("1D" for 1).
const std::string& dimsName(size_t nd);

struct LayerDef {
  std::string type, category, doc;
  std::vector<PortSpec> inputs, outputs;
  std::vector<ParamSpec> params;
  LowerFn lower;
  std::vector<std::string> aliases = {};
};

void add(CatalogueBuilder& cb, LayerDef d);

// --- Lowering helpers --------------------------------------------------------------------------

WeightFill fillFor(LoweringBuilder& b, const std::string& param);
int64_t intParam(LoweringBuilder& b, const std::string& name);
std::string strParam(LoweringBuilder& b, const std::string& name);

// Names x, through the Keras activation `act`, as the layer's output.
Status finish(LoweringBuilder& b, const std::string& x, const std::string& act);
// Expands a Keras int-or-list parameter to `n` values.
Result<std::vector<int64_t>> spatial(LoweringBuilder& b, const std::string& name, size_t n);

// --- The families, in the order addLayersDomain() calls them ------------------------------------

void addDense(CatalogueBuilder& cb);                            // core.cpp
void addReshaping(CatalogueBuilder& cb);                        // reshaping.cpp
void addRegularization(CatalogueBuilder& cb);                   // core.cpp
void addEmbedding(CatalogueBuilder& cb);                        // core.cpp
void addActivations(CatalogueBuilder& cb);                      // core.cpp
void addConvolutions(CatalogueBuilder& cb);                     // convolution.cpp
void addPooling(CatalogueBuilder& cb, size_t nd);               // pooling.cpp
void addPaddingAndResampling(CatalogueBuilder& cb, size_t nd);  // convolution.cpp
void addNormalization(CatalogueBuilder& cb);                    // normalization.cpp
void addMerging(CatalogueBuilder& cb);                          // core.cpp
void addSplit(CatalogueBuilder& cb);                            // reshaping.cpp
void addRecurrent(CatalogueBuilder& cb);                        // recurrent.cpp
void addAttention(CatalogueBuilder& cb);                        // attention.cpp

}  // namespace dw::layers
