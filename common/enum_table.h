// One name<->value table per enum: the spec parser, the *Name() functions,
// the JSON writer and error messages all read the same table, so a value
// cannot be spelled differently in two places.
//
// A table lists each value once under its canonical name, first; further
// rows with the same value are aliases the parser accepts (e.g. "none" for
// "no") and NameOf never returns.
#ifndef TRAINYARD_COMMON_ENUM_TABLE_H_
#define TRAINYARD_COMMON_ENUM_TABLE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace trainyard {

template <typename E>
struct EnumName {
  const char* name;
  E value;
};

// The canonical name of `value`; "?" for a value the table lacks.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return "?";
}

// The value named `name` exactly (canonical or alias).
template <typename E, size_t N>
constexpr std::optional<E> ValueOf(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& row : table) {
    if (name == row.name) return row.value;
  }
  return std::nullopt;
}

// "a, b, c": every name the parser accepts, for error messages.
template <typename E, size_t N>
std::string NamesOf(const EnumName<E> (&table)[N]) {
  std::string out;
  for (const EnumName<E>& row : table) {
    if (!out.empty()) out += ", ";
    out += row.name;
  }
  return out;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_ENUM_TABLE_H_
