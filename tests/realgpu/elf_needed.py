"""The DT_NEEDED entries of every ELF object of the driver (no binutils on
the GPU machine): which libraries besides libc a real driver's libraries and
programs name, so gpulet's image carries them all (scripts/image.sh).
usage: elf_needed.py DIR... (each DIR's files, links followed once)
Prints one line per file, then the union of what they name."""
import os
import struct
import sys


def needed(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    e_phoff, = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dyn = [], None
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + i * e_phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dyn = (p_offset, p_filesz)
    if not dyn:
        return []

    def offset(vaddr):
        for v, o, n in loads:
            if v <= vaddr < v + n:
                return vaddr - v + o
        return vaddr

    entries, strtab = [], None
    for k in range(dyn[1] // 16):
        tag, val = struct.unpack_from("<qQ", data, dyn[0] + 16 * k)
        if tag == 0:
            break
        if tag == 1:
            entries.append(val)
        elif tag == 5:
            strtab = offset(val)
    if strtab is None:
        return []
    return [data[strtab + v:data.index(b"\0", strtab + v)].decode() for v in entries]


union = set()
for d in sys.argv[1:]:
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            libs = needed(path)
        except (OSError, struct.error, ValueError):
            continue
        if libs is None:
            continue
        print(f"{path}: {' '.join(libs)}")
        union.update(libs)
print("union:", " ".join(sorted(union)))
