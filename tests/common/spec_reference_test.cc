// docs/reference/job-spec.md lists every spec field as the field tables
// generate them, between its spec-fields markers.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/spec/spec_reference.h"

#include "tests/test_paths.h"

namespace trainyard {
namespace {

constexpr char kBegin[] = "<!-- spec-fields:begin (generated from common/spec/spec_tables.cc) -->\n";
constexpr char kEnd[] = "<!-- spec-fields:end -->";

TEST(SpecReferenceTest, TheDocListsTheTablesFields) {
  const std::string path = std::string(TRAINYARD_SOURCE_DIR) + "/docs/reference/job-spec.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();
  const size_t begin = doc.find(kBegin);
  const size_t end = doc.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << "no '" << kBegin << "' in " << path;
  ASSERT_NE(end, std::string::npos) << "no '" << kEnd << "' in " << path;
  const std::string listed = doc.substr(begin + std::strlen(kBegin), end - begin - std::strlen(kBegin));
  const std::string generated = SpecReferenceTable();
  if (listed != generated) {
    const std::string out = std::string(TRAINYARD_BINARY_DIR) + "/spec-fields.md";
    std::ofstream(out) << generated;
    FAIL() << "the table between the markers of " << path << " is not the field tables'; the generated one is in "
           << out << ":\n"
           << generated;
  }
}

}  // namespace
}  // namespace trainyard
