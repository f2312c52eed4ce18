// A small well-formedness check for the SVG the schedule drawer writes: the XML declaration,
// one root element, balanced and properly nested tags, quoted attributes, escaped text. Enough
// for generated documents (no DTDs, CDATA or processing instructions after the declaration).
#pragma once

#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace ptdp_test {

struct XmlSummary {
  bool ok = false;
  std::string error;                    // why it is not well-formed
  std::string root;                     // name of the root element
  std::map<std::string, int> elements;  // element name -> number of occurrences
};

inline bool valid_entity(const std::string& s, std::size_t amp) {
  static const char* const kEntities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
  for (const char* e : kEntities) {
    if (s.compare(amp, std::string(e).size(), e) == 0) return true;
  }
  return false;
}

inline XmlSummary parse_xml(const std::string& doc) {
  XmlSummary out;
  auto fail = [&](const std::string& why, std::size_t at) {
    out.ok = false;
    out.error = why + " at offset " + std::to_string(at);
    return out;
  };
  const std::string decl = "<?xml version=\"1.0\"";
  if (doc.compare(0, decl.size(), decl) != 0) return fail("missing XML declaration", 0);
  std::size_t i = doc.find("?>");
  if (i == std::string::npos) return fail("unterminated XML declaration", 0);
  i += 2;
  std::vector<std::string> stack;
  bool root_closed = false;
  while (i < doc.size()) {
    if (doc[i] != '<') {
      if (doc[i] == '&' && !valid_entity(doc, i)) return fail("bad entity", i);
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(doc[i]))) {
        return fail("text outside the root element", i);
      }
      ++i;
      continue;
    }
    const std::size_t end = doc.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag", i);
    std::string tag = doc.substr(i + 1, end - i - 1);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return fail("unbalanced </" + name + ">", i);
      stack.pop_back();
      if (stack.empty()) root_closed = true;
    } else {
      if (root_closed) return fail("a second root element", i);
      const bool self_closing = !tag.empty() && tag.back() == '/';
      if (self_closing) tag.pop_back();
      std::size_t n = 0;
      while (n < tag.size() && (std::isalnum(static_cast<unsigned char>(tag[n])) || tag[n] == '-' ||
                                tag[n] == ':' || tag[n] == '_')) {
        ++n;
      }
      const std::string name = tag.substr(0, n);
      if (name.empty()) return fail("tag without a name", i);
      // Attributes: name="value" pairs.
      std::size_t a = n;
      while (a < tag.size()) {
        if (std::isspace(static_cast<unsigned char>(tag[a]))) {
          ++a;
          continue;
        }
        const std::size_t eq = tag.find('=', a);
        if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') {
          return fail("attribute without a quoted value in <" + name + ">", i);
        }
        const std::size_t close = tag.find('"', eq + 2);
        if (close == std::string::npos) return fail("unterminated attribute in <" + name + ">", i);
        const std::string value = tag.substr(eq + 2, close - eq - 2);
        if (value.find('<') != std::string::npos) return fail("'<' in an attribute value", i);
        a = close + 1;
      }
      if (stack.empty()) out.root = name;
      ++out.elements[name];
      if (!self_closing) stack.push_back(name);
      if (self_closing && stack.empty()) root_closed = true;
    }
    i = end + 1;
  }
  if (!stack.empty()) return fail("<" + stack.back() + "> is never closed", doc.size());
  if (out.root.empty()) return fail("no root element", doc.size());
  out.ok = true;
  return out;
}

}  // namespace ptdp_test
