#include "nodes/catalogue.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace dw {

namespace {
// The one place a domain is added.
using Provider = void (*)(CatalogueBuilder&);
constexpr Provider kDomainProviders[] = {
    addOnnxDomains,  addGraphDomain,   addLayersDomain, addOutputsDomain,
    addLossesDomain, addMetricsDomain, addGradDomain,   addMicrosoftDomain,
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string canonicalDomain(std::string_view domain) {
  if (domain.empty() || domain == "ai.onnx") return kOnnxDomain;
  return std::string(domain);
}

std::string onnxDomainName(std::string_view canonical) {
  return canonical == kOnnxDomain ? std::string() : std::string(canonical);
}

void CatalogueBuilder::add(NodeSpec spec) {
  specs_.push_back(std::move(spec));
}
void CatalogueBuilder::setVersionedLookup(const std::string& domain, VersionedLookup lookup) {
  lookups_[domain] = std::move(lookup);
}
void CatalogueBuilder::setDefaultOpset(const std::string& domain, int version) {
  defaultOpsets_[domain] = version;
}

namespace {

// The seed toolkit's node index spells some nodes its own way: typos it carries (Bernouilli,
// lsNaN with a lower-case L for the I), Microsoft-prefixed names for com.microsoft ops that
// share a name with an ai.onnx one, and layer variants that are one deepwire layer. A user who
// knows those names finds the node under them.
struct SeedName {
  const char* domain;
  const char* type;
  const char* seedName;
};
constexpr SeedName kSeedNames[] = {
    {"ai.onnx", "Bernoulli", "Bernouilli"},
    {"ai.onnx", "Col2Im", "Col2lm"},
    {"ai.onnx", "Hardmax", "HardMax"},
    {"ai.onnx", "MaxUnpool", "MaxUnPool"},
    {"ai.onnx", "IsNaN", "lsNaN"},
    {"ai.onnx", "IsInf", "lslnf"},
    {"ai.onnx", "TfIdfVectorizer", "TfldfVectorizer"},
    {"com.microsoft", "Irfft", "lrfft"},
    {"com.microsoft", "MatMulIntegerToFloat", "MatMulIntergerToFloat"},
    {"com.microsoft", "MaxpoolWithMask", "MaxPoolWithMask"},
    {"com.microsoft", "DequantizeLinear", "MicrosoftDequantizeLinear"},
    {"com.microsoft", "GatherND", "MicrosoftGatherND"},
    {"com.microsoft", "Gelu", "MicrosoftGelu"},
    {"com.microsoft", "GridSample", "MicrosoftGridSample"},
    {"com.microsoft", "MultiHeadAttention", "MicrosoftMultiHeadAttention"},
    {"com.microsoft", "Pad", "MicrosoftPad"},
    {"com.microsoft", "QLinearConv", "MicrosoftQLinearConv"},
    {"com.microsoft", "QuantizeLinear", "MicrosoftQuantizeLinear"},
    {"com.microsoft", "Range", "MicrosoftRange"},
    {"com.microsoft", "Trilu", "MicrosoftTrilu"},
    {"deepwire.layers", "MultiHeadAttention", "MutiHeadAttention"},
    {"deepwire.layers", "PReLU", "PReLU 2D"},
    {"deepwire.layers", "PReLU", "PReLU 3D"},
    {"deepwire.layers", "PReLU", "PReLU 4D"},
    {"deepwire.layers", "PReLU", "PReLU 5D"},
    {"deepwire.layers", "GRU", "RNN (GRU)"},
    {"deepwire.layers", "LSTM", "RNN (LSTM)"},
    {"deepwire.layers", "SimpleRNN", "RNN (SimpleRNN)"},
    {"deepwire", "Initializer1D", "1D"},
    {"deepwire", "Initializer2D", "2D"},
    {"deepwire", "Initializer3D", "3D"},
    {"deepwire", "Initializer4D", "4D"},
    {"deepwire", "Initializer5D", "5D"},
    {"deepwire", "Initializer6D", "6D"},
    {"deepwire", "InitializerScalar", "Scalar"},
};

}  // namespace

const Catalogue& Catalogue::instance() {
  static const Catalogue kCatalogue;
  return kCatalogue;
}

Catalogue::Catalogue() {
  CatalogueBuilder b;
  for (auto provider : kDomainProviders) provider(b);
  specs_ = std::move(b.specs_);
  lookups_ = std::move(b.lookups_);
  defaultOpsets_ = std::move(b.defaultOpsets_);
  for (auto& s : specs_)
    for (const auto& n : kSeedNames)
      if (s.domain == n.domain && s.type == n.type) s.seedNames.push_back(n.seedName);
  for (const auto& s : specs_) {
    sorted_.push_back(&s);
    byKey_[s.key()] = &s;
    for (const auto& alias : s.aliases) byKey_[s.domain + "::" + alias] = &s;
  }
  std::sort(sorted_.begin(), sorted_.end(), [](const NodeSpec* a, const NodeSpec* b) {
    return std::tie(a->domain, a->category, a->type) < std::tie(b->domain, b->category, b->type);
  });
}

const NodeSpec* Catalogue::find(std::string_view domain, std::string_view type) const {
  auto it = byKey_.find(canonicalDomain(domain) + "::" + std::string(type));
  return it == byKey_.end() ? nullptr : it->second;
}

const NodeSpec* Catalogue::find(std::string_view domain, std::string_view type,
                                int opsetVersion) const {
  const std::string dom = canonicalDomain(domain);
  const NodeSpec* current = find(dom, type);
  auto lookup = lookups_.find(dom);
  if (lookup == lookups_.end()) return current;
  // The current spec serves every opset from its since_version up to the domain's target.
  auto target = defaultOpsets_.find(dom);
  if (current && opsetVersion >= current->version &&
      (target == defaultOpsets_.end() || opsetVersion <= target->second))
    return current;
  const std::string key = dom + "::" + std::string(type) + "@" + std::to_string(opsetVersion);
  std::lock_guard<std::mutex> lock(versionedMutex_);
  auto it = versioned_.find(key);
  if (it != versioned_.end()) return it->second.get();
  auto spec = lookup->second(std::string(type), opsetVersion);
  if (spec && current) spec->category = current->category;
  const NodeSpec* out = spec.get();
  versioned_[key] = std::move(spec);
  return out;
}

std::vector<std::string> Catalogue::domains() const {
  std::set<std::string> s;
  for (const auto* spec : sorted_) s.insert(spec->domain);
  return {s.begin(), s.end()};
}

std::vector<std::string> Catalogue::categories() const {
  std::set<std::string> s;
  for (const auto* spec : sorted_) s.insert(spec->category);
  return {s.begin(), s.end()};
}

std::vector<std::string> Catalogue::suggest(std::string_view query, size_t max) const {
  const std::string q = lower(query);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto* spec : sorted_) {
    const std::string t = lower(spec->type);
    size_t d = editDistance(q, t);
    if (!q.empty() && t.find(q) != std::string::npos) d = std::min<size_t>(d, 1);
    if (d <= std::max<size_t>(2, q.size() / 3)) scored.emplace_back(d, spec->type);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, t] : scored) {
    if (out.size() >= max) break;
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

}  // namespace dw
