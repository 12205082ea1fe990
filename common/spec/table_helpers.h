// Helpers shared by the spec's table files (spec_tables*.cc): limits, a row
// with its own reader, a list of strings. Internal to the spec library.
#ifndef TRAINYARD_COMMON_SPEC_TABLE_HELPERS_H_
#define TRAINYARD_COMMON_SPEC_TABLE_HELPERS_H_

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/field_table.h"

namespace trainyard::spec {

using namespace spec_reader;  // NOLINT: the readers are written in the reader's terms

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
constexpr std::string_view kPathChars = "abcdefghijklmnopqrstuvwxyz0123456789_-./";

// A row whose reading is its own; the rest (writing, comparing, showing) is
// the member's.
template <typename S, typename T, typename Read>
Field<S> Own(std::string name, T S::*m, std::string type, std::string accepted, std::string doc, Read read) {
  Field<S> f = Leaf(std::move(name), m, std::move(type), std::move(accepted), std::move(doc));
  f.read = std::move(read);
  return f;
}

// A list of strings under `key`, each a scalar.
inline std::vector<std::string> StringList(const YAML::Node& n, const std::string& p, size_t max_items, size_t max_len,
                                           const std::string& what) {
  if (!n.IsSequence()) Fail(p, "must be a list of strings, got " + Describe(n));
  if (n.size() > max_items) Fail(p, absl::StrCat("must have at most ", max_items, " entries"));
  std::vector<std::string> out;
  for (const auto& e : n) {
    if (!e.IsScalar() || e.Scalar().size() > max_len) Fail(p, what + Describe(e));
    out.push_back(e.Scalar());
  }
  return out;
}

}  // namespace trainyard::spec

#endif  // TRAINYARD_COMMON_SPEC_TABLE_HELPERS_H_
