#include "common/log.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace trainyard::log {

void Write(Level level, const std::string& line) {
  switch (level) {
    case Level::kInfo: spdlog::info("{}", line); return;
    case Level::kWarn: spdlog::warn("{}", line); return;
    case Level::kError: spdlog::error("{}", line); return;
  }
}

std::string Escaped(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string_view shown = text.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 32);
  for (const char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (shown.size() < text.size()) {
    out += "... (";
    out += std::to_string(text.size());
    out += " bytes in all)";
  }
  return out;
}

namespace internal {

std::string_view CopyToPlaceholder(std::ostringstream& out, std::string_view format, bool* found) {
  *found = false;
  size_t i = 0;
  while (i < format.size()) {
    const char c = format[i];
    if ((c == '{' || c == '}') && i + 1 < format.size() && format[i + 1] == c) {  // escaped brace
      out << c;
      i += 2;
      continue;
    }
    if (c != '{') {
      out << c;
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string_view::npos) {  // a lone '{': printed as it is
      out << format.substr(i);
      return {};
    }
    const std::string_view spec = format.substr(i + 1, close - i - 1);
    // "{:.Nf}": fixed with N decimals; anything else prints as "{}".
    if (spec.size() >= 3 && spec.substr(0, 2) == ":." && spec.back() == 'f') {
      out.setf(std::ios_base::fixed, std::ios_base::floatfield);
      out.precision(std::atoi(std::string(spec.substr(2, spec.size() - 3)).c_str()));
    }
    *found = true;
    return format.substr(close + 1);
  }
  return {};
}

}  // namespace internal
}  // namespace trainyard::log
