"""Builds the extension ptdp._ptdp_ext from the committed SWIG output (no SWIG needed) against
an installed or built libptdp. Where the header and the library are is taken from, in order:

  PTDP_INCLUDE_DIR / PTDP_LIBRARY_DIR   the folders holding ptdp/ptdp.h and libptdp.so
  PTDP_PREFIX                           an install prefix (include/ and lib/, lib64/ or lib/<multiarch>/)
  PTDP_BUILD_DIR                        a CMake build folder of ptdp (the library in capi/)
  this source tree                      ../../capi/include for the header
  the compiler's default paths          e.g. after installing libptdp-dev

A library folder found this way is also the extension's run path, so `import ptdp` works without
LD_LIBRARY_PATH.
"""
import glob
import os
import re
import shutil

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def include_dir():
    candidates = [os.environ.get("PTDP_INCLUDE_DIR"),
                  os.environ.get("PTDP_PREFIX") and os.path.join(os.environ["PTDP_PREFIX"], "include"),
                  os.path.join(HERE, "..", "..", "capi", "include")]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "ptdp", "ptdp.h")):
            return os.path.abspath(d)
    return None


def library_dir():
    if os.environ.get("PTDP_LIBRARY_DIR"):
        return os.path.abspath(os.environ["PTDP_LIBRARY_DIR"])
    candidates = []
    if os.environ.get("PTDP_PREFIX"):
        prefix = os.environ["PTDP_PREFIX"]
        candidates += [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")] + glob.glob(
            os.path.join(prefix, "lib", "*-linux-gnu"))
    if os.environ.get("PTDP_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["PTDP_BUILD_DIR"], "capi"))
    for d in candidates:
        if glob.glob(os.path.join(d, "libptdp.so*")):
            return os.path.abspath(d)
    return None


def version(include):
    """The header's PTDP_VERSION_* (the library's one source of truth)."""
    if include is None:
        return "0.0.0"
    with open(os.path.join(include, "ptdp", "ptdp.h"), encoding="utf-8") as f:
        text = f.read()
    parts = [re.search(rf"#define PTDP_VERSION_{p} +(\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def license_metadata():
    """Apache-2.0 as the setuptools at hand writes licences: an SPDX expression (PEP 639,
    License-Expression) from setuptools 77 on, the License field before; LICENSE in the
    package's metadata either way."""
    major = int(setuptools.__version__.split(".")[0])
    field = "license_expression" if major >= 77 else "license"
    return {field: "Apache-2.0", "license_files": ["LICENSE"]}


class BuildPy(build_py):
    """Adds the committed generated/_ptdp.py to the package."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "ptdp")
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(os.path.join(HERE, "generated", "_ptdp.py"), os.path.join(target, "_ptdp.py"))


INCLUDE, LIBRARY = include_dir(), library_dir()
extension = Extension(
    "ptdp._ptdp_ext",
    sources=["generated/ptdp_wrap.c"],
    include_dirs=[INCLUDE] if INCLUDE else [],
    library_dirs=[LIBRARY] if LIBRARY else [],
    runtime_library_dirs=[LIBRARY] if LIBRARY else [],
    libraries=["ptdp"],
)

setup(version=version(INCLUDE), packages=["ptdp"], ext_modules=[extension], cmdclass={"build_py": BuildPy},
      **license_metadata())
