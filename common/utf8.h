// UTF-8 validation, for text that travels in proto strings and JSON.
#ifndef TRAINYARD_COMMON_UTF8_H_
#define TRAINYARD_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainyard {

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points
// past U+10FFFF).
inline bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

// `s` if it is valid UTF-8; else `s` with every byte >= 0x80 made '?'.
inline std::string AsValidUtf8(std::string s) {
  if (ValidUtf8(s)) return s;
  for (char& c : s) c = static_cast<unsigned char>(c) >= 0x80 ? '?' : c;
  return s;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_UTF8_H_
