// The shape of a spec section's field table (spec_tables.cc) and the walks
// over it: reading a YAML mapping, writing the canonical JSON, naming the
// first differing field, drawing random valid values and listing the fields
// for the reference. Each row is one key of the section: its name, type,
// accepted values and doc line, and what reads, writes, compares, shows and
// draws it. The default is the section struct's own (S{}).
// Internal to the spec library.
#ifndef TRAINYARD_COMMON_SPEC_FIELD_TABLE_H_
#define TRAINYARD_COMMON_SPEC_FIELD_TABLE_H_

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/job_spec.h"
#include "common/spec/spec_reader.h"
#include "common/splitmix.h"

namespace trainyard::spec {

using Json = nlohmann::ordered_json;
using spec_reader::MapReader;

// What a row's reader may consult beyond its own key.
struct ReadContext {
  SpecLimits limits;
  YAML::Node root;  // the whole spec
};

// The random source of the generated specs (SplitMix64 over a counter).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(SplitMix64(seed)) {}
  uint64_t Next() { return SplitMix64(state_++); }
  bool Coin(double p = 0.5) { return static_cast<double>(Next() >> 11) * 0x1.0p-53 < p; }
  // Uniform in [lo, hi], most often small: a random bit length first.
  int64_t Int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    const int bits = static_cast<int>(Next() % 64) + 1;
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    uint64_t v = Next() & mask;
    if (span != ~uint64_t{0}) v %= span + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + v);
  }
  double Double(double lo, double hi) {
    const double u = static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return Coin(0.2) ? lo : lo + (hi - lo) * u * u * u;
  }
  std::string Word(size_t min_len, size_t max_len, std::string_view alphabet) {
    std::string out(static_cast<size_t>(Int(static_cast<int64_t>(min_len), static_cast<int64_t>(max_len))), 'a');
    for (char& c : out) c = alphabet[Next() % alphabet.size()];
    return out;
  }

 private:
  uint64_t state_;
};

inline constexpr std::string_view kWordChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.";

// Values as the reference and the difference reports print them.
inline std::string Show(const std::string& v) { return absl::StrCat("\"", v, "\""); }
inline std::string Show(bool v) { return v ? "true" : "false"; }
inline std::string Show(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}
template <typename T>
requires std::is_integral_v<T> std::string Show(T v) { return std::to_string(v); }
template <typename E>
requires std::is_enum_v<E> std::string Show(E v) {  // rows of enums print their names instead
  return std::to_string(static_cast<int>(v));
}
template <typename T>
std::string Show(const std::vector<T>& v) {
  std::vector<std::string> parts;
  for (const T& e : v) parts.push_back(Show(e));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}
inline std::string Show(const std::map<std::string, std::string>& v) {
  std::vector<std::string> parts;
  for (const auto& [k, e] : v) parts.push_back(absl::StrCat(k, ": ", Show(e)));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

template <typename S>
struct Section;

template <typename S>
struct Field {
  std::string name;
  std::string type;      // reference: "integer", "number", "boolean", "string", ...
  std::string accepted;  // reference: the accepted values
  std::string doc;       // reference: one line
  // Reads the key when present, checking its type and range.
  std::function<void(MapReader&, S*, const ReadContext&)> read;
  // Adds the key to the section's JSON; null: never written (an alias).
  std::function<void(const S&, Json*)> write;
  // The first differing field under `prefix` (dotted), with both values.
  std::function<std::optional<std::string>(const S&, const S&, const std::string& prefix)> diff;
  // The value as text (the reference's default column); null: none shown.
  std::function<std::string(const S&)> show;
  // Sets a random value within the limits; null: left at its default.
  std::function<void(Rng&, S*)> random;
  // Puts the default back.
  std::function<void(S*)> reset;
  // Whether the key is written for this section (the fields of other kinds
  // are not); null: always.
  std::function<bool(const S&)> applies;
  // Tidy of a nested section.
  std::function<void(S*)> tidy;
  // The rows of a nested section, for the reference.
  std::function<void(const std::string& prefix, std::vector<std::vector<std::string>>* rows)> nested_rows;

  Field&& When(std::function<bool(const S&)> p) && {
    applies = std::move(p);
    return std::move(*this);
  }
  Field&& Random(std::function<void(Rng&, S*)> r) && {
    random = std::move(r);
    return std::move(*this);
  }
  bool Applies(const S& s) const { return !applies || applies(s); }
};

// A section: its rows in reading order, and the rules between its fields,
// checked before unknown keys are refused and after.
template <typename S>
struct Section {
  std::vector<Field<S>> fields;
  bool kind_shorthand = false;  // `model: mlp` stands for `model: {kind: mlp}`
  std::function<void(MapReader&, S*, const ReadContext&)> before_unknown;
  std::function<void(MapReader&, S*, const ReadContext&)> after;
};

template <typename S>
void ReadSection(const Section<S>& sec, const YAML::Node& node, const std::string& path, S* s, const ReadContext& ctx) {
  if (sec.kind_shorthand && node.IsScalar()) {
    YAML::Node map(YAML::NodeType::Map);
    map["kind"] = node.Scalar();
    ReadSection(sec, map, path, s, ctx);
    return;
  }
  MapReader r(node, path);
  for (const Field<S>& f : sec.fields) f.read(r, s, ctx);
  if (sec.before_unknown) sec.before_unknown(r, s, ctx);
  r.RejectUnknown();
  if (sec.after) sec.after(r, s, ctx);
}

template <typename S>
Json WriteSection(const Section<S>& sec, const S& s) {
  Json j = Json::object();
  for (const Field<S>& f : sec.fields) {
    if (f.write && f.Applies(s)) f.write(s, &j);
  }
  return j;
}

template <typename S>
std::optional<std::string> DiffSection(const Section<S>& sec, const S& a, const S& b, const std::string& prefix) {
  for (const Field<S>& f : sec.fields) {
    if (!f.diff) continue;
    if (std::optional<std::string> d = f.diff(a, b, prefix)) return d;
  }
  return std::nullopt;
}

// Puts the default back into every field that does not apply (the JSON
// leaves it out), in nested sections too.
template <typename S>
void Tidy(const Section<S>& sec, S* s) {
  for (const Field<S>& f : sec.fields) {
    if (!f.Applies(*s)) {
      if (f.reset) f.reset(s);
    } else if (f.tidy) {
      f.tidy(s);
    }
  }
}

// Random values for some fields (a kind drawn late may rule out fields drawn
// early: Tidy afterwards).
template <typename S>
void RandomSection(const Section<S>& sec, Rng& rng, S* s) {
  for (const Field<S>& f : sec.fields) {
    if (f.random && rng.Coin(0.6)) f.random(rng, s);
  }
}

// Reference rows: field (dotted), type, default, accepted values, doc.
template <typename S>
void ReferenceRows(const Section<S>& sec, const std::string& prefix, std::vector<std::vector<std::string>>* rows) {
  const S defaults{};
  for (const Field<S>& f : sec.fields) {
    if (f.nested_rows) {
      f.nested_rows(absl::StrCat(prefix, f.name, "."), rows);
      continue;
    }
    rows->push_back({absl::StrCat(prefix, f.name), f.type, f.show ? f.show(defaults) : "", f.accepted, f.doc});
  }
}

// ---- Row makers: one per value type. `m` is the struct member. ----

template <typename S, typename T>
Field<S> Leaf(std::string name, T S::*m, std::string type, std::string accepted, std::string doc) {
  Field<S> f;
  f.name = name;
  f.type = std::move(type);
  f.accepted = std::move(accepted);
  f.doc = std::move(doc);
  f.write = [name, m](const S& s, Json* j) { (*j)[name] = s.*m; };
  f.show = [m](const S& s) { return Show(s.*m); };
  f.diff = [name, m](const S& a, const S& b, const std::string& prefix) -> std::optional<std::string> {
    if (a.*m == b.*m) return std::nullopt;
    return absl::StrCat(prefix, name, ": ", Show(a.*m), " vs ", Show(b.*m));
  };
  f.reset = [m](S* s) { s->*m = S{}.*m; };
  return f;
}

std::string RangeText(int64_t lo, int64_t hi);
std::string RangeText(double lo, double hi);

template <typename S, typename T>
Field<S> Int(std::string name, T S::*m, int64_t lo, int64_t hi, std::string doc) {
  Field<S> f = Leaf(name, m, "integer", RangeText(lo, hi), std::move(doc));
  f.read = [name, m, lo, hi](MapReader& r, S* s, const ReadContext&) { r.Int(name, &(s->*m), lo, hi); };
  f.random = [m, lo, hi](Rng& g, S* s) { s->*m = static_cast<T>(g.Int(lo, hi)); };
  return f;
}

template <typename S>
Field<S> Num(std::string name, double S::*m, double lo, double hi, std::string doc) {
  Field<S> f = Leaf(name, m, "number", RangeText(lo, hi), std::move(doc));
  f.read = [name, m, lo, hi](MapReader& r, S* s, const ReadContext&) { r.Double(name, &(s->*m), lo, hi); };
  f.random = [m, lo, hi](Rng& g, S* s) { s->*m = g.Double(lo, hi); };
  return f;
}

template <typename S>
Field<S> Flag(std::string name, bool S::*m, std::string doc) {
  Field<S> f = Leaf(name, m, "boolean", "`true`, `false`", std::move(doc));
  f.read = [name, m](MapReader& r, S* s, const ReadContext&) { r.Bool(name, &(s->*m)); };
  f.random = [m](Rng& g, S* s) { s->*m = g.Coin(); };
  return f;
}

template <typename S>
Field<S> Str(std::string name, std::string S::*m, size_t max_len, std::string doc) {
  Field<S> f = Leaf(name, m, "string", absl::StrCat("at most ", max_len, " characters"), std::move(doc));
  f.read = [name, m, max_len](MapReader& r, S* s, const ReadContext&) { r.String(name, &(s->*m), max_len); };
  f.random = [m](Rng& g, S* s) { s->*m = g.Word(0, 12, kWordChars); };
  return f;
}

template <typename E, size_t N>
std::string NamesText(const EnumName<E> (&names)[N]) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : names) parts.push_back(absl::StrCat("`", name, "`"));
  return absl::StrJoin(parts, ", ");
}

template <typename S, typename E, size_t N>
Field<S> Choice(std::string name, E S::*m, const EnumName<E> (&names)[N], std::string doc,
                std::vector<std::string> unimplemented = {}) {
  Field<S> f = Leaf(name, m, "string", NamesText(names), std::move(doc));
  f.write = [name, m, &names](const S& s, Json* j) { (*j)[name] = NameOf(names, s.*m); };
  f.show = [m, &names](const S& s) { return std::string(NameOf(names, s.*m)); };
  f.diff = [name, m, &names](const S& a, const S& b, const std::string& prefix) -> std::optional<std::string> {
    if (a.*m == b.*m) return std::nullopt;
    return absl::StrCat(prefix, name, ": ", NameOf(names, a.*m), " vs ", NameOf(names, b.*m));
  };
  f.read = [name, m, &names, unimplemented](MapReader& r, S* s, const ReadContext&) {
    r.Enum<E>(name, &(s->*m), names, unimplemented);
  };
  f.random = [m, &names](Rng& g, S* s) { s->*m = names[g.Next() % N].value; };
  return f;
}

// A nested section under `name`.
template <typename S, typename T>
Field<S> Sub(std::string name, T S::*m, const Section<T>& sec, std::string doc) {
  Field<S> f;
  f.name = name;
  f.type = "mapping";
  f.doc = std::move(doc);
  f.read = [name, m, &sec](MapReader& r, S* s, const ReadContext& ctx) {
    if (YAML::Node n = r.Child(name)) ReadSection(sec, n, r.PathOf(name), &(s->*m), ctx);
  };
  f.write = [name, m, &sec](const S& s, Json* j) { (*j)[name] = WriteSection(sec, s.*m); };
  f.diff = [name, m, &sec](const S& a, const S& b, const std::string& prefix) {
    return DiffSection(sec, a.*m, b.*m, absl::StrCat(prefix, name, "."));
  };
  f.random = [m, &sec](Rng& g, S* s) { RandomSection(sec, g, &(s->*m)); };
  f.reset = [m](S* s) { s->*m = S{}.*m; };
  f.tidy = [m, &sec](S* s) { Tidy(sec, &(s->*m)); };
  f.nested_rows = [&sec](const std::string& prefix, std::vector<std::vector<std::string>>* rows) {
    ReferenceRows(sec, prefix, rows);
  };
  return f;
}

}  // namespace trainyard::spec

#endif  // TRAINYARD_COMMON_SPEC_FIELD_TABLE_H_
