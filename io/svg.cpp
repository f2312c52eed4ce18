#include "io/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace ptdp {

namespace svg {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default:
          // XML 1.0 allows no other control character, not even as a reference.
          if (c >= 0x20 || c == '\t' || c == '\n') out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: its length from the lead byte, then the continuation bytes;
    // overlong forms, surrogates, code points above U+10FFFF and U+FFFE/U+FFFF are not kept.
    std::size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07u; }
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0u) == 0x80u;
      cp = (cp << 6) | (p[i + k] & 0x3Fu);
    }
    if (ok) {
      const uint32_t min_cp = len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u;
      ok = cp >= min_cp && cp <= 0x10FFFFu && !(cp >= 0xD800u && cp <= 0xDFFFu) && cp != 0xFFFEu && cp != 0xFFFFu;
    }
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for one bad byte; resynchronise at the next
      ++i;
    }
  }
  return out;
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::string hsl_hex(double h, double s, double l) {
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = h / 60;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) { r = c; g = x; }
  else if (hp < 2) { r = x; g = c; }
  else if (hp < 3) { g = c; b = x; }
  else if (hp < 4) { g = x; b = c; }
  else if (hp < 5) { r = x; b = c; }
  else { r = c; b = x; }
  const double m = l - c / 2;
  char buf[8];
  auto byte = [](double u) { return static_cast<int>(std::lround(std::clamp(u, 0.0, 1.0) * 255)); };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", byte(r + m), byte(g + m), byte(b + m));
  return buf;
}

double tick_step(double span, int ticks) {
  if (!(span > 0) || !std::isfinite(span) || ticks < 1) return 1;
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= f * mag) return f * mag;
  }
  return 10 * mag;
}

}  // namespace svg

}  // namespace ptdp
