#!/usr/bin/env python3
"""Generates the Julia, Rust and Fortran declarations of the ptdp C API from its public header.

capi/include/ptdp/ptdp.h is the one source: SWIG parses it (`swig -xml`, the same front end that
builds the Python extension), and this script turns SWIG's parse tree into

  bindings/julia/PTDP/src/libptdp.jl    constants, structs and one `ccall` wrapper per function
  bindings/rust/ptdp-sys/src/bindings.rs  #[repr(C)] structs, consts and an `extern "C"` block
  bindings/fortran/ptdp.f90             module ptdp_enums (constants) and module ptdp
                                        (bind(c) derived types and interfaces)

Usage:
  gen-bindings.py              rewrite the generated files
  gen-bindings.py --check      regenerate in memory; exit 1 naming every stale file
  gen-bindings.py --coverage   exit 1 naming every PTDP_API function missing from a generated file
Exit status 77 means SWIG is not installed (ctest reports the test as skipped).

Only the Fortran output needs more than the C types: Fortran distinguishes a scalar passed by
reference from an array. A pointer parameter is an array there when it is a `const` pointer to
numbers or handles, a pointer to a record without `struct_size` (ptdp_action, ptdp_p2p_op) other
than a lone output, or when the header documents it as one: the next parameter is its capacity or
byte size, or its @param text says "room for" or "extents".
"""
import argparse
import dataclasses
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER_REL = "capi/include/ptdp/ptdp.h"
OUTPUTS = {
    "julia": "bindings/julia/PTDP/src/libptdp.jl",
    "rust": "bindings/rust/ptdp-sys/src/bindings.rs",
    "fortran": "bindings/fortran/ptdp.f90",
}
SKIP = 77


# ----------------------------------------------------------------------------------------------
# The C model: types, and the declarations of the header in their order.

@dataclasses.dataclass
class CType:
    kind: str                  # base | ptr | array | fn
    name: str = ""             # base: int32_t, char, void, or a typedef name
    const: bool = False        # the object of this type is const (`const int` or `int* const`)
    to: "CType" = None         # ptr / array: the element type; fn: the return type
    n: int = 0                 # array length
    params: list = None        # fn: [(name, CType)]

    def is_ptr_to(self, kind=None, name=None):
        return (self.kind == "ptr" and (kind is None or self.to.kind == kind) and
                (name is None or self.to.name == name))


@dataclasses.dataclass
class Decl:
    kind: str                  # constant | enum | handle | struct | fnptr | function
    name: str
    items: list = None         # enum: [(name, value)]; struct: [(name, CType)]
    type: CType = None         # fnptr / function: the fn type
    value: int = 0             # constant
    brief: str = ""            # the first sentence of the Doxygen comment


def split_top(s, sep=","):
    """Splits at separators outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def closing(s, start):
    """Index of the parenthesis closing the one at s[start]."""
    depth = 0
    for i in range(start, len(s)):
        depth += {"(": 1, ")": -1}.get(s[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced SWIG type: " + s)


def parse_swig_type(s, constants, params=None):
    """SWIG's type strings read left to right: `p.q(const).int64_t` is `const int64_t*`."""
    if s.startswith("p."):
        return CType("ptr", to=parse_swig_type(s[2:], constants, params))
    if s.startswith("r."):
        raise ValueError("C++ reference in a C header: " + s)
    if s.startswith("q("):
        end = closing(s, 1)
        quals = s[2:end].split()
        t = parse_swig_type(s[end + 2:], constants, params)
        t.const = t.const or "const" in quals
        return t
    if s.startswith("a("):
        end = closing(s, 1)
        dim = s[2:end]
        n = int(dim) if dim.isdigit() else constants[dim]
        return CType("array", n=n, to=parse_swig_type(s[end + 2:], constants, params))
    if s.startswith("f("):
        end = closing(s, 1)
        ret = parse_swig_type(s[end + 2:], constants)
        arg_types = [parse_swig_type(a, constants) for a in split_top(s[2:end])]
        if [str(a) for a in split_top(s[2:end])] == ["void"]:
            arg_types = []
        names = [p[0] for p in params] if params is not None else [""] * len(arg_types)
        return CType("fn", to=ret, params=list(zip(names, arg_types)))
    name = s
    for prefix in ("enum ", "struct "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return CType("base", name=name)


def attrs(node):
    al = node.find("attributelist")
    if al is None:
        return {}
    return {a.get("name"): a.get("value") for a in al.findall("attribute")}


def parms(node):
    pl = node.find("attributelist/parmlist")
    if pl is None:
        return []
    return [(attrs(p).get("name", ""), attrs(p)["type"]) for p in pl.findall("parm")]


def eval_constant(expr):
    if not re.fullmatch(r"[0-9()+\-*/ ]+", expr):
        return None
    return int(eval(expr))  # digits and arithmetic only, checked above


def run_swig(header):
    swig = shutil.which("swig") or shutil.which("swig4.0")
    if swig is None:
        print("gen-bindings: swig not found; install swig (4.0 or later)", file=sys.stderr)
        sys.exit(SKIP)
    include_dir = os.path.dirname(os.path.dirname(header))
    with tempfile.TemporaryDirectory() as tmp:
        iface = os.path.join(tmp, "ptdp.i")
        with open(iface, "w") as f:
            # PTDP_API expands to a GCC attribute, which SWIG's C parser does not read.
            f.write('%module ptdp\n#define __attribute__(x)\n%include "ptdp/ptdp.h"\n')
        out = os.path.join(tmp, "ptdp.xml")
        subprocess.run([swig, "-xml", "-xmllite", "-I" + include_dir, "-o", out, iface], check=True)
        return ET.parse(out).getroot()


def doc_briefs(text):
    """Maps each documented name to the first sentence of its Doxygen comment."""
    briefs = {}
    pattern = re.compile(r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*(?P<decl>[^;{]*?[;{])", re.S)
    for m in pattern.finditer(text):
        doc = re.sub(r"^\s*\*\s?", "", m.group("doc"), flags=re.M)
        brief = re.search(r"@brief\s+(.*?)(?:\n\s*\n|\n\s*@|$)", doc, re.S)
        brief = brief.group(1) if brief else doc.split("@")[0]
        brief = " ".join(brief.split())
        brief = re.split(r"(?<=[.!?])\s", brief)[0]
        decl = m.group("decl")
        name = (re.search(r"(\w+)\s*\(", decl) if "PTDP_API" in decl else
                re.search(r"typedef\s+(?:struct|enum)\s+(\w+)", decl) or
                re.search(r"\(\s*\*\s*(\w+)\s*\)", decl) or re.search(r"(\w+)\s*;", decl))
        if name:
            briefs.setdefault(name.group(1), brief)
    return briefs


def param_docs(text):
    """Maps (function, parameter) to the parameter's @param text, and (function, parameter,
    "direction") to its direction when the @param names one ("in", "out" or "in,out")."""
    docs = {}
    pattern = re.compile(r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*PTDP_API[^;]*?(?P<fn>\w+)\s*\(", re.S)
    for m in pattern.finditer(text):
        doc = re.sub(r"^\s*\*\s?", "", m.group("doc"), flags=re.M)
        for p in re.finditer(r"@param(?:\[([\w,]+)\])?\s+(\w+)\s+(.*?)(?=\n\s*@|\Z)", doc, re.S):
            docs[(m.group("fn"), p.group(2))] = " ".join(p.group(3).split())
            if p.group(1):
                docs[(m.group("fn"), p.group(2), "direction")] = p.group(1)
    return docs


def header_text(header):
    """The header's text with the PTDP_DEPRECATED(...) markers taken out (attributes only)."""
    return re.sub(r"\bPTDP_DEPRECATED\([^)]*\)\s*", "", open(header).read())


def api_functions(text):
    """The PTDP_API functions, read from the header text without SWIG (for --coverage)."""
    return re.findall(r"^PTDP_API\b[^;(]*?\b(\w+)\s*\(", text, re.M)


def load_model(header):
    text = header_text(header)
    briefs = doc_briefs(text)
    root = run_swig(header)
    constants, decls = {}, []
    handle_names, struct_names, enum_names, fn_names = set(), set(), set(), set()

    def visit(node):
        a = attrs(node)
        if node.tag == "include" and not a.get("name", "").endswith(HEADER_REL.split("/")[-1]):
            if a.get("name", "").endswith(".i"):
                pass  # the interface file itself: descend
            else:
                return
        if node.tag == "constant":
            value = eval_constant(a.get("value", ""))
            if value is not None:
                constants[a["name"]] = value
                decls.append(Decl("constant", a["name"], value=value, brief=briefs.get(a["name"], "")))
        elif node.tag == "enum":
            items = []
            for item in node.iter("enumitem"):
                ia = attrs(item)
                items.append((ia["name"], eval_constant(ia["enumvalue"])))
            decls.append(Decl("enum", a["name"], items=items, brief=briefs.get(a["name"], "")))
            enum_names.add(a["name"])
        elif node.tag == "class":
            fields = []
            for member in node.findall("cdecl"):
                ma = attrs(member)
                fields.append((ma["name"], parse_swig_type(ma.get("decl", "") + ma["type"], constants)))
            decls.append(Decl("struct", a["name"], items=fields, brief=briefs.get(a["name"], "")))
            struct_names.add(a["name"])
        elif node.tag == "cdecl" and a.get("kind") == "typedef":
            full = a.get("decl", "") + a["type"]
            if full.startswith("p.f("):
                t = parse_swig_type(full[2:], constants, parms(node))
                decls.append(Decl("fnptr", a["name"], type=t, brief=briefs.get(a["name"], "")))
                fn_names.add(a["name"])
            elif full.startswith("p.struct "):
                decls.append(Decl("handle", a["name"], brief=briefs.get(a["name"], "")))
                handle_names.add(a["name"])
            # `typedef enum x {...} x;` and `typedef struct x {...} x;` need nothing more.
        elif node.tag == "cdecl" and a.get("kind") == "function":
            ps = parms(node)
            t = parse_swig_type(a["decl"] + a["type"], constants, ps)
            t.params = [(name, parse_swig_type(ptype, constants)) for name, ptype in ps
                        if ptype != "void"]
            decls.append(Decl("function", a["name"], type=t, brief=briefs.get(a["name"], "")))
        for child in node:
            if child.tag == "attributelist":
                for grand in child:
                    if grand.tag not in ("attribute", "parmlist", "kwargs"):
                        visit(grand)
            else:
                visit(child)

    visit(root)
    kinds = {"handle": handle_names, "struct": struct_names, "enum": enum_names, "fnptr": fn_names}

    def resolve(t):
        if t is None:
            return
        if t.kind == "base":
            for k, names in kinds.items():
                if t.name in names:
                    t.kind = k
        resolve(t.to)
        for _, p in t.params or []:
            resolve(p)

    for d in decls:
        resolve(d.type)
        if d.kind == "struct":
            for _, ft in d.items:
                resolve(ft)
    functions = [d.name for d in decls if d.kind == "function"]
    missing = sorted(set(api_functions(text)) - set(functions))
    if missing:
        sys.exit("gen-bindings: SWIG did not report " + ", ".join(missing))
    return decls, param_docs(text)


# ----------------------------------------------------------------------------------------------
# Shared helpers of the emitters.

BANNER = ("Generated by scripts/gen-bindings.py from capi/include/ptdp/ptdp.h: do not edit.",
          "Regenerate with `python3 scripts/gen-bindings.py`; ctest checks that it is fresh.")


def wrap(text, width, indent=""):
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(indent) + len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w).strip()
    if cur:
        lines.append(cur)
    return lines


SCALARS = ("int", "int32_t", "int64_t", "uint64_t", "size_t", "float", "double", "char")


def struct_has_size(decls, name):
    for d in decls:
        if d.kind == "struct" and d.name == name:
            return bool(d.items) and d.items[0][0] == "struct_size"
    return False


# ----------------------------------------------------------------------------------------------
# Rust (ptdp-sys): the shapes bindgen would produce, with i32 for C enums.

RUST_BASE = {"int": "::std::os::raw::c_int", "int32_t": "i32", "int64_t": "i64", "uint64_t": "u64",
             "size_t": "usize", "float": "f32", "double": "f64", "char": "::std::os::raw::c_char",
             "void": "::std::os::raw::c_void"}


def rust_type(t):
    if t.kind == "base":
        return RUST_BASE[t.name]
    if t.kind in ("enum", "handle", "struct", "fnptr"):
        return t.name
    if t.kind == "ptr":
        return ("*const " if t.to.const else "*mut ") + rust_type(t.to)
    if t.kind == "array":
        return "[%s; %d]" % (rust_type(t.to), t.n)
    if t.kind == "fn":
        args = ", ".join("%s: %s" % (rust_ident(n or "arg%d" % i), rust_type(p))
                         for i, (n, p) in enumerate(t.params))
        ret = "" if t.to.kind == "base" and t.to.name == "void" else " -> " + rust_type(t.to)
        return 'Option<unsafe extern "C" fn(%s)%s>' % (args, ret)
    raise ValueError(t)


RUST_KEYWORDS = {"type", "in", "fn", "ref", "mut", "match", "loop", "move", "where", "use", "impl",
                 "self", "super", "crate", "struct", "enum", "trait", "box", "async", "await", "dyn"}


def rust_ident(name):
    return "r#" + name if name in RUST_KEYWORDS else name


def rust_doc(brief, indent=""):
    return [indent + "/// " + line for line in wrap(brief, 96, indent + "/// ")] if brief else []


def emit_rust(decls, _):
    out = ["// " + line for line in BANNER]
    out.append("")
    for d in decls:
        if d.kind == "constant":
            out += rust_doc(d.brief)
            out.append("pub const %s: u32 = %d;" % (d.name, d.value))
        elif d.kind == "enum":
            out.append("")
            out += rust_doc(d.brief)
            out.append("pub type %s = i32;" % d.name)
            for item, value in d.items:
                out.append("pub const %s: %s = %d;" % (item, d.name, value))
        elif d.kind == "handle":
            out.append("")
            out.append("#[repr(C)]")
            out.append("pub struct %s_impl {" % d.name)
            out.append("    _opaque: [u8; 0],")
            out.append("}")
            out += rust_doc(d.brief)
            out.append("pub type %s = *mut %s_impl;" % (d.name, d.name))
        elif d.kind == "struct":
            out.append("")
            out += rust_doc(d.brief)
            out.append("#[repr(C)]")
            out.append("#[derive(Debug, Copy, Clone)]")
            out.append("pub struct %s {" % d.name)
            for name, ft in d.items:
                out.append("    pub %s: %s," % (rust_ident(name), rust_type(ft)))
            out.append("}")
        elif d.kind == "fnptr":
            out.append("")
            out += rust_doc(d.brief)
            line = "pub type %s = %s;" % (d.name, rust_type(d.type))
            if len(line) > 100:  # rustfmt's layout of a long function pointer type
                t = d.type
                out.append("pub type %s = Option<" % d.name)
                out.append('    unsafe extern "C" fn(')
                for n, p in t.params:
                    out.append("        %s: %s," % (rust_ident(n), rust_type(p)))
                out.append("    ) -> %s," % rust_type(t.to))
                out.append(">;")
            else:
                out.append(line)
    out.append("")
    out.append('extern "C" {')
    for d in decls:
        if d.kind != "function":
            continue
        args = ", ".join("%s: %s" % (rust_ident(n), rust_type(p)) for n, p in d.type.params)
        out += rust_doc(d.brief, "    ")
        line = "    pub fn %s(%s) -> %s;" % (d.name, args, rust_type(d.type.to))
        if len(line) > 110:
            out.append("    pub fn %s(" % d.name)
            for n, p in d.type.params:
                out.append("        %s: %s," % (rust_ident(n), rust_type(p)))
            out.append("    ) -> %s;" % rust_type(d.type.to))
        else:
            out.append(line)
    out.append("}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# Julia (src/libptdp.jl): the shapes Clang.jl would produce; `libptdp` comes from PTDP.jl.

JULIA_BASE = {"int": "Cint", "int32_t": "Int32", "int64_t": "Int64", "uint64_t": "UInt64",
              "size_t": "Csize_t", "float": "Cfloat", "double": "Cdouble", "char": "Cchar",
              "void": "Cvoid"}


def julia_type(t, arg=False):
    if t.kind == "base":
        return JULIA_BASE[t.name]
    if t.kind in ("enum", "handle", "struct", "fnptr"):
        return t.name
    if t.kind == "ptr":
        if arg and t.to.kind == "base" and t.to.name == "char" and t.to.const:
            return "Cstring"
        return "Ptr{%s}" % julia_type(t.to)
    if t.kind == "array":
        return "NTuple{%d, %s}" % (t.n, julia_type(t.to))
    raise ValueError(t)


def julia_doc(brief):
    return ["# " + line for line in wrap(brief, 96, "# ")] if brief else []


JULIA_KEYWORDS = {"end", "function", "type", "global", "local", "module", "begin", "do", "in",
                  "for", "while", "if", "else", "let", "quote", "macro", "struct", "mutable"}


def julia_ident(name):
    return name + "_" if name in JULIA_KEYWORDS else name


def emit_julia(decls, _):
    out = ["# " + line for line in BANNER]
    out.append("# Included by PTDP.jl, which defines `libptdp` (the library's name or path).")
    out.append("")
    for d in decls:
        if d.kind == "constant":
            out += julia_doc(d.brief)
            out.append("const %s = %d" % (d.name, d.value))
        elif d.kind == "enum":
            out.append("")
            out += julia_doc(d.brief)
            out.append("const %s = Cint" % d.name)
            for item, value in d.items:
                out.append("const %s = %s(%d)" % (item, d.name, value))
        elif d.kind == "handle":
            out.append("")
            out += julia_doc(d.brief)
            out.append("mutable struct %s_impl end" % d.name)
            out.append("const %s = Ptr{%s_impl}" % (d.name, d.name))
        elif d.kind == "struct":
            out.append("")
            out += julia_doc(d.brief)
            out.append("struct %s" % d.name)
            for name, ft in d.items:
                out.append("    %s::%s" % (julia_ident(name), julia_type(ft)))
            out.append("end")
        elif d.kind == "fnptr":
            out.append("")
            out += julia_doc(d.brief)
            sig = ", ".join(julia_type(p) for _, p in d.type.params)
            out.append("# C signature: (%s) -> %s" % (sig, julia_type(d.type.to)))
            out.append("const %s = Ptr{Cvoid}" % d.name)
        elif d.kind == "function":
            out.append("")
            out += julia_doc(d.brief)
            names = [julia_ident(n) for n, _ in d.type.params]
            types = [julia_type(p, arg=True) for _, p in d.type.params]
            ret = julia_type(d.type.to, arg=True)
            type_tuple = "(" + ", ".join(types) + ("," if len(types) == 1 else "") + ")"
            out.append("function %s(%s)" % (d.name, ", ".join(names)))
            call = "    ccall((:%s, libptdp), %s, %s" % (d.name, ret, type_tuple)
            call += "".join(", " + n for n in names) + ")"
            if len(call) > 110:
                out.append("    ccall((:%s, libptdp), %s," % (d.name, ret))
                out.append("          " + type_tuple + ",")
                out.append("          " + ", ".join(names) + ")")
            else:
                out.append(call)
            out.append("end")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# Fortran (ptdp.f90): module ptdp_enums (named constants) and module ptdp (types, interfaces).

FORTRAN_BASE = {"int": "integer(c_int)", "int32_t": "integer(c_int32_t)",
                "int64_t": "integer(c_int64_t)", "uint64_t": "integer(c_int64_t)",
                "size_t": "integer(c_size_t)", "float": "real(c_float)",
                "double": "real(c_double)"}
CAPACITY_NAMES = {"capacity", "name_capacity", "bytes", "dst_bytes"}


def fortran_field(name, t):
    if t.kind == "array":
        decl, _ = fortran_field(name, t.to)
        return decl, "%s(%d)" % (name, t.n)
    if t.kind == "base" and t.name in FORTRAN_BASE:
        return FORTRAN_BASE[t.name], name
    if t.kind == "base" and t.name == "char":  # char name[N]: a C string in a struct
        return "character(kind=c_char)", name
    if t.kind == "enum":
        return "integer(c_int)", name
    if t.kind in ("handle",) or (t.kind == "ptr" and t.to.kind != "fn"):
        return "type(c_ptr)", name
    if t.kind == "fnptr":
        return "type(c_funptr)", name
    if t.kind == "struct":
        return "type(%s)" % t.name, name
    raise ValueError((name, t))


def fortran_is_array(decls, fn, params, i, docs):
    """See the module docstring: when a pointer parameter is an array in Fortran."""
    name, t = params[i]
    target = t.to
    nxt = params[i + 1][0] if i + 1 < len(params) else ""
    doc = docs.get((fn, name), "").lower()
    documented = nxt in CAPACITY_NAMES or "room for" in doc or "extents" in doc
    if target.kind == "struct":
        if struct_has_size(decls, target.name):
            return False
        return target.const or documented
    if target.kind in ("base", "enum", "handle") and target.const:
        return True
    return documented


def fortran_dummy(decls, fn, params, i, docs, callback=False):
    """The declaration of parameter i: (type-spec with attributes, name)."""
    name, t = params[i]
    if t.kind == "base" and t.name in FORTRAN_BASE:
        return FORTRAN_BASE[t.name] + ", value", name
    if t.kind == "enum":
        return "integer(c_int), value", name
    if t.kind == "handle":
        return "type(c_ptr), value", name
    if t.kind == "fnptr":
        return "type(c_funptr), value", name
    if t.kind != "ptr":
        raise ValueError((fn, name, t))
    target = t.to
    intent = "intent(in)" if target.const else "intent(out)"
    if not target.const and docs.get((fn, name, "direction")) == "in,out":
        intent = "intent(inout)"  # read and written: an out array's values may not survive the call
    if target.kind == "base" and target.name == "void":
        return "type(c_ptr), value", name
    if target.kind == "base" and target.name == "char":
        return "character(kind=c_char), %s" % intent, name + "(*)"
    if target.kind == "ptr":  # const char* const* argv: an array of C strings
        return "type(c_ptr), intent(in)", name + "(*)"
    array = not callback and fortran_is_array(decls, fn, params, i, docs)
    if target.kind == "struct":
        spec = "type(%s)" % target.name
        if not target.const:
            intent = "intent(inout)"  # option structs carry struct_size in
    elif target.kind == "handle":
        spec = "type(c_ptr)"
    elif target.kind == "enum":
        spec = "integer(c_int)"
    else:
        spec = FORTRAN_BASE[target.name]
    return spec + ", " + intent, name + ("(*)" if array else "")


def fortran_lines(text, indent):
    """Free-form lines of at most 100 characters, continued with `&`."""
    lines, cur = [], indent
    for token in re.findall(r'"[^"]*"|[^,]+,?\s*', text):
        if len(cur) + len(token) > 98 and cur.strip():
            lines.append(cur.rstrip() + " &")
            cur = indent + "    "
        cur += token
    lines.append(cur.rstrip())
    return lines


def fortran_comment(brief, indent):
    return [indent + "! " + line for line in wrap(brief, 96, indent + "! ")] if brief else []


def fortran_procedure(decls, d, docs, indent, abstract=False):
    t = d.type
    names = [n for n, _ in t.params]
    is_sub = t.to.kind == "base" and t.to.name == "void"
    head = ("subroutine " if is_sub else "function ") + d.name + "(" + ", ".join(names) + ")"
    bind = "bind(c)" if abstract else 'bind(c, name="%s")' % d.name
    out = [""] + fortran_comment(d.brief, indent) + fortran_lines(head, indent)
    if len(out[-1]) + 1 + len(bind) > 98:
        out[-1] += " &"
        out.append(indent + "    " + bind)
    else:
        out[-1] += " " + bind
    out.append(indent + "  import")
    out.append(indent + "  implicit none")
    for i in range(len(t.params)):
        spec, decl = fortran_dummy(decls, d.name, t.params, i, docs, callback=abstract)
        out.append("%s  %s :: %s" % (indent, spec, decl))
    if not is_sub:
        if t.to.kind in ("enum",) or (t.to.kind == "base" and t.to.name in FORTRAN_BASE):
            ret = "integer(c_int)" if t.to.kind == "enum" else FORTRAN_BASE[t.to.name]
        elif t.to.kind == "ptr":
            ret = "type(c_ptr)"  # const char*: convert with ptdp_util's ptdp_string()
        else:
            raise ValueError(d.name)
        out.append("%s  %s :: %s" % (indent, ret, d.name))
    out.append(indent + ("end subroutine " if is_sub else "end function ") + d.name)
    return out


def emit_fortran(decls, docs):
    # Fortran names are case-insensitive: refuse a header whose names would collide.
    seen = {}
    for d in decls:
        names = [d.name] + ([n for n, _ in d.items] if d.kind == "enum" else [])
        for n in names:
            if d.kind in ("handle",) and n not in seen:
                continue
            if n.lower() in seen and seen[n.lower()] != n:
                sys.exit("gen-bindings: %s and %s are one name in Fortran" % (seen[n.lower()], n))
            seen[n.lower()] = n
    out = ["! " + line for line in BANNER]
    out += ["", "!> Named constants of the C API: version numbers, limits and every enum value.",
            "module ptdp_enums", "  use, intrinsic :: iso_c_binding, only: c_int", "  implicit none",
            "  public"]
    for d in decls:
        if d.kind == "constant":
            out += fortran_comment(d.brief, "  ")
            out.append("  integer(c_int), parameter :: %s = %d" % (d.name, d.value))
        elif d.kind == "enum":
            out.append("")
            out += fortran_comment(d.brief or d.name, "  ")
            for item, value in d.items:
                out.append("  integer(c_int), parameter :: %s = %d" % (item, value))
    out += ["end module ptdp_enums", ""]
    out += ["!> The C API as bind(c) interfaces. Handles are type(c_ptr); option structs are",
            "!> bind(c) derived types filled by their ptdp_*_init function; callbacks are",
            "!> type(c_funptr) from c_funloc of a procedure with the matching abstract interface.",
            "module ptdp", "  use, intrinsic :: iso_c_binding", "  use ptdp_enums",
            "  implicit none", "  public"]
    for d in decls:
        if d.kind == "struct":
            out.append("")
            out += fortran_comment(d.brief, "  ")
            out.append("  type, bind(c) :: %s" % d.name)
            for name, ft in d.items:
                spec, decl = fortran_field(name, ft)
                out.append("    %s :: %s" % (spec, decl))
            out.append("  end type %s" % d.name)
    fnptrs = [d for d in decls if d.kind == "fnptr"]
    if fnptrs:
        out += ["", "  abstract interface"]
        for d in fnptrs:
            out += fortran_procedure(decls, d, docs, "    ", abstract=True)
        out.append("  end interface")
    out += ["", "  interface"]
    for d in decls:
        if d.kind == "function":
            out += fortran_procedure(decls, d, docs, "    ")
    out += ["  end interface", "end module ptdp"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------

EMITTERS = {"julia": emit_julia, "rust": emit_rust, "fortran": emit_fortran}
# How each generated file declares a C function (for --coverage).
COVERAGE = {"julia": r"^function {name}\(.*\n\s*ccall\(\(:{name}, libptdp\)",
            "rust": r"^\s*pub fn {name}\(",
            "fortran": r'bind\(c, name="{name}"\)'}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    mode.add_argument("--coverage", action="store_true",
                      help="fail if a PTDP_API function is missing from a generated file")
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this script's)")
    args = ap.parse_args()
    header = os.path.join(args.root, HEADER_REL)

    if args.coverage:
        functions = api_functions(header_text(header))
        failed = False
        for lang, rel in OUTPUTS.items():
            text = open(os.path.join(args.root, rel)).read()
            missing = [f for f in functions
                       if not re.search(COVERAGE[lang].format(name=f), text, re.M)]
            if missing:
                failed = True
                print("%s lacks %d of %d functions: %s" % (rel, len(missing), len(functions),
                                                          ", ".join(missing)))
            else:
                print("%s declares all %d functions" % (rel, len(functions)))
        return 1 if failed else 0

    decls, docs = load_model(header)
    stale = []
    for lang, rel in OUTPUTS.items():
        text = EMITTERS[lang](decls, docs)
        path = os.path.join(args.root, rel)
        old = open(path).read() if os.path.exists(path) else None
        if args.check:
            if old != text:
                stale.append(rel)
                diff = difflib.unified_diff((old or "").splitlines(True), text.splitlines(True),
                                            rel + " (committed)", rel + " (from the header)", n=1)
                sys.stdout.writelines(list(diff)[:40])
        elif old != text:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print("wrote " + rel)
    if stale:
        print("stale generated files (run python3 scripts/gen-bindings.py): " + ", ".join(stale))
        return 1
    if args.check:
        print("generated files are fresh: " + ", ".join(OUTPUTS.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
