#include "common/spec/spec_overrides.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainyard {
namespace {

absl::Status Apply(YAML::Node root, const std::string& set) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--set '", set, "': ", why));
  };
  const size_t eq = set.find('=');
  if (eq == std::string::npos) return bad("expected KEY=VALUE, e.g. max_steps=20000");
  const std::string key = set.substr(0, eq);
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& p : parts) {
    if (p.empty()) return bad("the key has an empty part; write a dotted path such as data.batch_size");
  }
  YAML::Node value;
  try {
    value = YAML::Load(set.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return bad(absl::StrCat("the value is not YAML: ", e.msg));
  }
  // Each level is a newly constructed handle: assigning one yaml-cpp node
  // handle to another would rebind the node in the tree, not the handle.
  std::vector<YAML::Node> path{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node parent = path.back();
    if (!parent[parts[i]].IsDefined() || parent[parts[i]].IsNull()) {
      parent[parts[i]] = YAML::Node(YAML::NodeType::Map);
    } else if (!parent[parts[i]].IsMap()) {
      return bad(absl::StrCat("'", absl::StrJoin(parts.begin(), parts.begin() + i + 1, "."),
                              "' is not a mapping in the spec"));
    }
    path.push_back(parent[parts[i]]);
  }
  path.back()[parts.back()] = value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ApplySpecOverrides(const std::string& spec_text, const std::vector<std::string>& sets) {
  if (sets.empty()) return spec_text;
  YAML::Node root;
  try {
    root = YAML::Load(spec_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the spec is not valid YAML or JSON: ", e.msg));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("--set needs a spec that is a YAML mapping");
  for (const std::string& set : sets) {
    if (absl::Status s = Apply(root, set); !s.ok()) return s;
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace trainyard
