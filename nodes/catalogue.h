// The node catalogue: every node type deepwire knows, from every domain.
//
// How to add a domain: write a provider function `void addXDomain(CatalogueBuilder&)` that adds
// NodeSpecs (see graph_domain.cpp for a small one), and list it in kDomainProviders in
// catalogue.cpp. Nothing else needs to change: palette, panels, validation, JSON and ONNX all read
// the catalogue.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "nodes/spec.h"

namespace dw {

inline constexpr const char* kOnnxDomain = "ai.onnx";
inline constexpr const char* kTrainingDomain = "ai.onnx.preview.training";
inline constexpr const char* kGraphDomain = "deepwire";
inline constexpr const char* kLayersDomain = "deepwire.layers";
inline constexpr const char* kLossesDomain = "deepwire.losses";
inline constexpr const char* kMetricsDomain = "deepwire.metrics";
// The backward and training-mode ops autodiff emits (engine/training/autodiff.h).
inline constexpr const char* kGradDomain = "com.deepwire.grad";
// ONNX Runtime's contrib operators (nodes/microsoft_domain.cpp).
inline constexpr const char* kMicrosoftDomain = "com.microsoft";
inline constexpr int kDefaultOnnxOpset = 17;

// "" and "ai.onnx" both mean the default ONNX domain; the catalogue uses "ai.onnx".
std::string canonicalDomain(std::string_view domain);
// The spelling ONNX files use: "" for the default domain.
std::string onnxDomainName(std::string_view canonical);

class Catalogue;

class CatalogueBuilder {
 public:
  void add(NodeSpec spec);
  // Resolves a spec for a specific opset of its domain, for domains whose specs are versioned.
  using VersionedLookup =
      std::function<std::unique_ptr<NodeSpec>(const std::string& type, int opsetVersion)>;
  void setVersionedLookup(const std::string& domain, VersionedLookup lookup);
  // The opset a new model imports for this domain.
  void setDefaultOpset(const std::string& domain, int version);

 private:
  friend class Catalogue;
  std::vector<NodeSpec> specs_;
  std::map<std::string, VersionedLookup> lookups_;
  std::map<std::string, int> defaultOpsets_;
};

class Catalogue {
 public:
  // The process-wide catalogue, built on first use (about 20 ms).
  static const Catalogue& instance();

  // Every node type at its current version, sorted by domain, category, type.
  const std::vector<const NodeSpec*>& all() const { return sorted_; }
  const NodeSpec* find(std::string_view domain, std::string_view type) const;
  // The spec of `type` as it was at `opsetVersion` of its domain (for imported models that use an
  // older opset). Falls back to the current spec for unversioned domains. Thread-safe.
  const NodeSpec* find(std::string_view domain, std::string_view type, int opsetVersion) const;
  std::vector<std::string> domains() const;
  std::vector<std::string> categories() const;
  const std::map<std::string, int>& defaultOpsets() const { return defaultOpsets_; }
  // Types spelled like `query`, for "did you mean" hints in errors.
  std::vector<std::string> suggest(std::string_view query, size_t max = 3) const;

 private:
  Catalogue();
  std::vector<NodeSpec> specs_;
  std::vector<const NodeSpec*> sorted_;
  std::map<std::string, const NodeSpec*> byKey_;
  std::map<std::string, CatalogueBuilder::VersionedLookup> lookups_;
  std::map<std::string, int> defaultOpsets_;
  mutable std::mutex versionedMutex_;
  mutable std::map<std::string, std::unique_ptr<NodeSpec>> versioned_;
};

// Domain providers (one per domain family).
void addOnnxDomains(CatalogueBuilder& b);  // ai.onnx + ai.onnx.preview.training, from libonnx
void addGraphDomain(CatalogueBuilder& b);
void addLayersDomain(CatalogueBuilder& b);     // deepwire.layers: Keras-style layers   // deepwire:
                                               // Input, Output, Initializer
void addOutputsDomain(CatalogueBuilder& b);    // deepwire.layers: Output Predict, Output Train
void addLossesDomain(CatalogueBuilder& b);     // deepwire.losses
void addMetricsDomain(CatalogueBuilder& b);    // deepwire.metrics
void addGradDomain(CatalogueBuilder& b);       // com.deepwire.grad: what training graphs hold
void addMicrosoftDomain(CatalogueBuilder& b);  // com.microsoft: ONNX Runtime's contrib ops
// The forward ops whose gradient UnaryGrad computes (its "op" attribute).
const std::vector<std::string>& unaryGradOps();
const std::vector<std::string>& initializerFills();  // the Initializer node's fill kinds
// The precisions a session runs in (the Accelerator node's `precision`, the CLI's --precision,
// engine::BackendOptions::precision).
const std::vector<std::string>& precisionNames();

}  // namespace dw
