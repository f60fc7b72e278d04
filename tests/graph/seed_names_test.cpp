// The seed toolkit's node index against the catalogue: every node it lists is there, under its
// own type, an alias, or the seed's spelling (NodeSpec::seedNames), except the com.microsoft
// operators not yet built, which are listed here so that the list shrinks as they arrive.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "nodes/catalogue.h"

namespace {

// Not in the catalogue yet (issue 21), each a com.microsoft operator, and two index entries
// that name no node: "Resume" heads a page of the seed's layer list, and RawConstantOfShape has
// no definition anywhere in the seed or in ONNX Runtime's schemas.
const std::set<std::string> kNotYet = {
    "Resume",
    "RawConstantOfShape",
};

bool listed(const std::string& name) {
  for (const dw::NodeSpec* s : dw::Catalogue::instance().all()) {
    if (s->type == name) return true;
    for (const auto* names : {&s->aliases, &s->seedNames})
      for (const auto& n : *names)
        if (n == name) return true;
  }
  return false;
}

TEST(SeedNames, EveryNodeOfTheSeedIndexIsInTheCatalogue) {
  std::ifstream f(std::string(DW_SOURCE_DIR) + "/tests/graph/seed_node_names.txt");
  ASSERT_TRUE(f);
  std::string name;
  int total = 0, found = 0;
  while (std::getline(f, name)) {
    if (name.empty() || name[0] == '#') continue;
    ++total;
    SCOPED_TRACE(name);
    if (listed(name)) {
      ++found;
      EXPECT_EQ(kNotYet.count(name), 0u) << "now in the catalogue: take it off kNotYet";
    } else {
      EXPECT_EQ(kNotYet.count(name), 1u) << "the seed lists it and the catalogue does not";
    }
  }
  EXPECT_GT(total, 350);
  EXPECT_EQ(found + static_cast<int>(kNotYet.size()), total);
}

TEST(SeedNames, SpellingsAreSearchNamesNotOpTypes) {
  // A model's "lsNaN" is not IsNaN: the seed's spellings help people find nodes, and loading
  // does not accept them.
  const auto& cat = dw::Catalogue::instance();
  EXPECT_EQ(cat.find("ai.onnx", "lsNaN"), nullptr);
  const dw::NodeSpec* isnan = cat.find("ai.onnx", "IsNaN");
  ASSERT_NE(isnan, nullptr);
  EXPECT_EQ(isnan->seedNames, std::vector<std::string>{"lsNaN"});
}

}  // namespace
