"""ffi_build.py: generates the cffi (out-of-line, API mode) C glue from native/include/splitrpc.h.

Run by CMake at build time: ``python ffi_build.py splitrpc.h out.c``. The cdef is derived from
the header itself, so the header stays the one description of the C API.
"""
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
        m = re.match(r"#define\s+(\w+)\s+(\d+)\s*$", s)
        if m:
            defines[m.group(1)] = m.group(2)
            lines.append(f"#define {m.group(1)} {m.group(2)}")
        elif not s.startswith("#"):
            lines.append(line)
    body = "\n".join(lines)
    for name, value in defines.items():  # array sizes must be literal for the cdef parser
        body = re.sub(r"\[\s*%s\s*\]" % name, f"[{value}]", body)
    return body


def main(header: str, out: str) -> None:
    with open(header) as f:
        cdef = cdef_from_header(f.read())
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source("splitrpc._native._splitrpc_cffi", '#include "splitrpc.h"')
    ffi.emit_c_code(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
