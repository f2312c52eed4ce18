// UTF-8 as the tokenizers need it: strict decoding (no overlong forms, no surrogates, nothing
// above U+10FFFF, as Rust's str and PCRE2 accept), so text that is not UTF-8 can be walked one
// invalid byte at a time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ptdp {

/// The UTF-8 bytes of a code point (<= U+10FFFF).
inline std::string utf8_encode(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// The length (1..4) of the valid UTF-8 character at `pos` (< text.size()), its code point in
/// *cp when cp is not null; 0 when the bytes there are not a valid character.
inline std::size_t utf8_decode(std::string_view text, std::size_t pos, char32_t* cp) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  std::size_t n;
  char32_t v;
  char32_t min;
  if (b0 < 0x80) {
    if (cp) *cp = b0;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, v = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, v = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, v = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (pos + n > text.size()) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  if (cp) *cp = v;
  return n;
}

/// The length of the character at `pos`, or 1 for a byte that does not start a valid one.
inline std::size_t utf8_length_or_one(std::string_view text, std::size_t pos) {
  const std::size_t n = utf8_decode(text, pos, nullptr);
  return n == 0 ? 1 : n;
}

}  // namespace ptdp
