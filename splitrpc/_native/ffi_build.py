"""ffi_build.py: generates the cffi (out-of-line, API mode) C glue from the public headers in native/include.

Run by CMake at build time: ``python ffi_build.py splitrpc.h splitrpc_gpu.h out.c``. The cdef is
derived from the headers themselves, so they stay the one description of the C API.
"""
import os
import re
import sys

import cffi


def cdef_from_header(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    defines = {}
    lines = []
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)[uUlL]*\s*$", s)
        if m:
            defines[m.group(1)] = m.group(2)
            lines.append(f"#define {m.group(1)} {m.group(2)}")
        elif not s.startswith("#"):
            lines.append(line)
    body = "\n".join(lines)
    for name, value in defines.items():  # array sizes must be literal for the cdef parser
        body = re.sub(r"\[\s*%s\s*\]" % name, f"[{value}]", body)
    return body


def main(headers: list, out: str) -> None:
    ffi = cffi.FFI()
    includes = []
    for header in headers:
        with open(header) as f:
            ffi.cdef(cdef_from_header(f.read()))
        includes.append(f'#include "{os.path.basename(header)}"')
    ffi.set_source("splitrpc._native._splitrpc_cffi", "\n".join(includes))
    ffi.emit_c_code(out)


if __name__ == "__main__":
    main(sys.argv[1:-1], sys.argv[-1])
