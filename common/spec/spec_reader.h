// The YAML reader of the spec parsers (job specs and Accelerate config
// files): a mapping reader that checks each field's type and range as it is
// read, remembers which keys were read so unknown ones can be named, and
// fails with a SpecError carrying the field's dotted path. Internal to
// common/: the public entry points return absl::Status instead.
#ifndef TRAINYARD_COMMON_SPEC_SPEC_READER_H_
#define TRAINYARD_COMMON_SPEC_SPEC_READER_H_

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/enum_table.h"
#include "common/utf8.h"

namespace trainyard::spec_reader {

inline std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Longest names (job, layer, Slurm option values) and paths a spec takes.
inline constexpr size_t kMaxName = 128;
inline constexpr size_t kMaxPath = 4096;

// A spec error carries the dotted field path; thrown inside the parser only
// and turned into an InvalidArgument status at its boundary.
struct SpecError {
  std::string message;
};

[[noreturn]] inline void Fail(const std::string& path, const std::string& what) {
  throw SpecError{absl::StrCat("spec field '", path, "': ", what)};
}

inline std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

inline std::string Describe(const YAML::Node& node) {
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "null";
  return absl::StrCat("'", node.Scalar(), "'");
}

// Reads the keys of one YAML mapping, remembering which were consumed so that
// unknown keys can be reported.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
    if (!node_.IsMap()) Fail(path_.empty() ? "<root>" : path_, "must be a mapping, got " + Describe(node_));
  }

  // Returns the child node, or an undefined node when absent.
  YAML::Node Child(const std::string& key) {
    seen_.insert(key);
    return node_[key];
  }

  bool Has(const std::string& key) const { return static_cast<bool>(node_[key]); }
  std::string PathOf(const std::string& key) const { return Join(path_, key); }

  template <typename T>
  void Int(const std::string& key, T* out, int64_t lo, int64_t hi) {
    YAML::Node n = Child(key);
    if (!n) return;
    const std::string p = PathOf(key);
    int64_t v = 0;
    if (!n.IsScalar()) Fail(p, "must be an integer, got " + Describe(n));
    try {
      v = n.as<int64_t>();
    } catch (const YAML::Exception&) {
      Fail(p, "must be an integer, got " + Describe(n));
    }
    if (v < lo || v > hi) {
      Fail(p, absl::StrCat("must be between ", lo, " and ", hi, ", got ", v));
    }
    *out = static_cast<T>(v);
  }

  void Double(const std::string& key, double* out, double lo, double hi) {
    YAML::Node n = Child(key);
    if (!n) return;
    const std::string p = PathOf(key);
    double v = 0;
    if (!n.IsScalar()) Fail(p, "must be a number, got " + Describe(n));
    try {
      v = n.as<double>();
    } catch (const YAML::Exception&) {
      Fail(p, "must be a number, got " + Describe(n));
    }
    if (!std::isfinite(v) || v < lo || v > hi) {
      std::ostringstream msg;
      msg << "must be a finite number between " << lo << " and " << hi << ", got " << n.Scalar();
      Fail(p, msg.str());
    }
    *out = v;
  }

  void Bool(const std::string& key, bool* out) {
    YAML::Node n = Child(key);
    if (!n) return;
    if (!n.IsScalar()) Fail(PathOf(key), "must be true or false, got " + Describe(n));
    try {
      *out = n.as<bool>();
    } catch (const YAML::Exception&) {
      Fail(PathOf(key), "must be true or false, got " + Describe(n));
    }
  }

  void String(const std::string& key, std::string* out, size_t max_len) {
    YAML::Node n = Child(key);
    if (!n) return;
    if (!n.IsScalar()) Fail(PathOf(key), "must be a string, got " + Describe(n));
    if (!ValidUtf8(n.Scalar())) Fail(PathOf(key), "must be valid UTF-8");
    if (n.Scalar().size() > max_len) {
      Fail(PathOf(key), absl::StrCat("must be at most ", max_len, " characters"));
    }
    *out = n.Scalar();
  }

  // A list of exactly `count` numbers, each in [lo, hi].
  void Doubles(const std::string& key, std::vector<double>* out, size_t count, double lo, double hi) {
    YAML::Node n = Child(key);
    if (!n) return;
    const std::string p = PathOf(key);
    const std::string want = absl::StrCat("must be a list of ", count, " numbers, each between ", lo, " and ", hi);
    if (!n.IsSequence() || n.size() != count) Fail(p, absl::StrCat(want, ", got ", Describe(n)));
    std::vector<double> values;
    for (const YAML::Node& item : n) {
      double v = 0;
      try {
        v = item.as<double>();
      } catch (const YAML::Exception&) {
        Fail(p, want);
      }
      if (!std::isfinite(v) || v < lo || v > hi) Fail(p, want);
      values.push_back(v);
    }
    *out = values;
  }

  // Parses an enum from its case-insensitive name. `names` lists accepted
  // spellings; `unimplemented` lists names that are valid in the spec format
  // but not supported by this build.
  template <typename E, size_t N>
  void Enum(const std::string& key, E* out, const EnumName<E> (&names)[N],
            const std::vector<std::string>& unimplemented = {}) {
    YAML::Node n = Child(key);
    if (!n) return;
    const std::string list = NamesOf(names);
    if (!n.IsScalar()) Fail(PathOf(key), absl::StrCat("must be one of: ", list, "; got ", Describe(n)));
    const std::string v = Lower(n.Scalar());
    for (const auto& [name, value] : names) {
      if (Lower(name) == v) {
        *out = value;
        return;
      }
    }
    for (const auto& name : unimplemented) {
      // "torchscript:" stands for every "torchscript:PATH".
      const bool prefix = !name.empty() && name.back() == ':';
      if (Lower(name) == v || (prefix && v.rfind(Lower(name), 0) == 0)) {
        Fail(PathOf(key), absl::StrCat("'", n.Scalar(), "' is not supported by this version yet; accepted: ", list));
      }
    }
    Fail(PathOf(key), absl::StrCat("unknown value '", n.Scalar(), "'; accepted: ", list));
  }

  // Fails on the first key that was never read.
  void RejectUnknown() const {
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (!seen_.count(key)) {
        std::vector<std::string> known(seen_.begin(), seen_.end());
        Fail(PathOf(key), absl::StrCat("unknown key; accepted keys here: ", absl::StrJoin(known, ", ")));
      }
    }
  }

 private:
  const YAML::Node node_;
  std::string path_;
  std::set<std::string> seen_;
};

// "A, B,C" -> {"A", "B", "C"}: Accelerate writes lists of layer classes as
// one comma-separated string. Empty items are dropped.
inline std::vector<std::string> SplitCommaList(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace trainyard::spec_reader

#endif  // TRAINYARD_COMMON_SPEC_SPEC_READER_H_
