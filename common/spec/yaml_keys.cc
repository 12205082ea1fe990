#include "common/spec/yaml_keys.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// Depth-first; bounded by the document, which its reader bounds in size.
absl::Status Check(const YAML::Node& node, const std::string& path, const std::string& what, int depth) {
  if (depth > 64) return absl::OkStatus();  // the parsers refuse such nesting themselves
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (auto s = Check(node[i], absl::StrCat(path, "[", i, "]"), what, depth + 1); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (!node.IsMap()) return absl::OkStatus();
  std::map<std::string, int> seen;  // key -> its first line (1-based)
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = kv.first.Scalar();
    const std::string at = path.empty() ? key : absl::StrCat(path, ".", key);
    const int line = kv.first.Mark().line + 1;
    if (auto [it, fresh] = seen.emplace(key, line); !fresh) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": key '", at, "' appears twice (lines ", it->second, " and ", line, "); give it once"));
    }
    if (auto s = Check(kv.second, at, what, depth + 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNoDuplicateKeys(const YAML::Node& root, const std::string& what) {
  try {
    return Check(root, "", what, 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace trainyard
