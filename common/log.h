// Process logging for code that cannot include spdlog: LibTorch's headers
// carry their own {fmt} (v12), which Debian's spdlog (built on {fmt} 9)
// does not compile against, so the worker logs through this facade and only
// log.cc, which never sees LibTorch, talks to spdlog.
//
// Format strings take `{}` (the argument as an ostream prints it) and
// `{:.Nf}` (fixed, N decimals); `{{`/`}}` print braces. Thread-safe.
#ifndef TRAINYARD_COMMON_LOG_H_
#define TRAINYARD_COMMON_LOG_H_

#include <sstream>
#include <string>
#include <string_view>

namespace trainyard::log {

enum class Level { kInfo, kWarn, kError };

// Writes one line at `level` to the process log (spdlog's default logger).
void Write(Level level, const std::string& line);

// A string a peer sent (a hello's job id, a sign-in's address), made safe
// for one log line: printable ASCII stays, a backslash becomes `\\`, every
// other byte (newlines, escape sequences, anything not ASCII) `\xNN`; past
// `max_bytes` of the input it is cut and says how long it was ("... (N
// bytes in all)"). So a peer can neither forge a line nor fill the log.
std::string Escaped(std::string_view text, size_t max_bytes = 200);

namespace internal {

// Copies `format` up to its next placeholder, applies the placeholder's
// precision to `out`, and returns the rest (empty when no placeholder is left).
std::string_view CopyToPlaceholder(std::ostringstream& out, std::string_view format, bool* found);

inline void FormatTo(std::ostringstream& out, std::string_view format) {
  bool found = false;
  format = CopyToPlaceholder(out, format, &found);
}

template <typename T, typename... Rest>
void FormatTo(std::ostringstream& out, std::string_view format, const T& first, const Rest&... rest) {
  bool found = false;
  format = CopyToPlaceholder(out, format, &found);
  if (!found) return;
  out << first;
  out.unsetf(std::ios_base::floatfield);
  out.precision(6);
  FormatTo(out, format, rest...);
}

}  // namespace internal

template <typename... Args>
std::string Format(std::string_view format, const Args&... args) {
  std::ostringstream out;
  out << std::boolalpha;
  internal::FormatTo(out, format, args...);
  return out.str();
}

template <typename... Args>
void Info(std::string_view format, const Args&... args) {
  Write(Level::kInfo, Format(format, args...));
}
template <typename... Args>
void Warn(std::string_view format, const Args&... args) {
  Write(Level::kWarn, Format(format, args...));
}
template <typename... Args>
void Error(std::string_view format, const Args&... args) {
  Write(Level::kError, Format(format, args...));
}

}  // namespace trainyard::log

#endif  // TRAINYARD_COMMON_LOG_H_
