#!/usr/bin/python3
"""NVML's function prototypes, as facts: each declared function's return type
and parameter types (names dropped, spaces normalised), one per line.

    tests/abi/prototypes.py NVML_H    prints them (how nvml-580-functions.txt
                                      was made from NVIDIA's nvml.h)

test_simulator_abi.py reads src/nvml/nvml_abi.h with the same parser."""
import re
import sys

DECL = re.compile(r"\b(nvmlReturn_t|const\s+char\s*\*)\s*(nvml[A-Za-z0-9_]+)\s*\(([^;{)]*)\)\s*;")


def param_type(p):
    """A parameter without its name: 'const char *uuid' -> 'const char *'."""
    p = " ".join(p.split())
    if p == "void":
        return p
    p = re.sub(r"\s*\[[^\]]*\]$", " *", p)        # an array parameter is a pointer
    p = re.sub(r"\s*\b[A-Za-z_][A-Za-z0-9_]*$", "", p) if re.search(r"[\s*]", p) else p
    return re.sub(r"\s*\*\s*", " *", p).strip()


def prototypes(text):
    """{name: 'return name(type, type)'} of every function declared in text."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\bDECLDIR\b", " ", text)  # NVIDIA's export macro, before or after const
    out = {}
    for ret, name, params in DECL.findall(text):
        types = ", ".join(param_type(p) for p in params.split(",")) if params.strip() else "void"
        out[name] = f"{param_type(ret + ' x')} {name}({types})"  # the return type, as a parameter's
    return out


if __name__ == "__main__":
    for name, proto in sorted(prototypes(open(sys.argv[1]).read()).items()):
        print(proto)
