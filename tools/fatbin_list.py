#!/usr/bin/env python3
"""tools/fatbin_list.py PROGRAM... — lists the CUDA code embedded in each program's .nv_fatbin
section, one line per entry: "PROGRAM elf sm_90" (machine code) or "PROGRAM ptx sm_90" (PTX, which
the driver compiles at start), in the spirit of `cuobjdump --list-elf --list-ptx` for machines
without cuobjdump. Reads the fat binary headers (magic 0xBA55ED50; entry kind 1 = PTX, 2 = ELF;
the architecture as a 32-bit number at byte 28 of each entry's header). Exit 0 when every program
was read, 1 when one is not an ELF file or its fat binary section is malformed (saying which),
2 on bad usage. A program with no .nv_fatbin section prints "PROGRAM none" (exit 0).
"""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "elf"}


def section(path, name):
    """The bytes of the ELF64 section NAME of PATH, or None when it has none."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    strtab = header(shstrndx)
    for i in range(shnum):
        h = header(i)
        start = strtab[4] + h[0]
        if data[start:data.index(b"\0", start)].decode() == name:
            return data[h[4]:h[4] + h[5]]
    return None


def entries(blob):
    """(kind, arch) for every entry of every fat binary in BLOB (they are concatenated, 8-aligned)."""
    out, pos = [], 0
    while pos + 16 <= len(blob):
        magic, _version, hsize, fsize = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            if not any(blob[pos:pos + 16]):  # padding between fat binaries
                pos += 8
                continue
            raise ValueError(f"no fat binary magic at offset {pos} of .nv_fatbin")
        e, end = pos + hsize, pos + hsize + fsize
        if end > len(blob):
            raise ValueError(f"fat binary at offset {pos} runs past the section's end")
        while e + 32 <= end:
            kind, _unk, ehsize, psize = struct.unpack_from("<HHIQ", blob, e)
            arch, = struct.unpack_from("<I", blob, e + 28)
            if ehsize == 0:
                raise ValueError(f"entry at offset {e} has an empty header")
            out.append((KINDS.get(kind, f"kind{kind}"), arch))
            e += ehsize + psize
        pos = (end + 7) // 8 * 8
    return out


def main(argv):
    if len(argv) < 2:
        print("usage: tools/fatbin_list.py PROGRAM...", file=sys.stderr)
        return 2
    rc = 0
    for path in argv[1:]:
        try:
            blob = section(path, ".nv_fatbin")
            found = entries(blob) if blob else []
        except (OSError, ValueError, struct.error) as e:
            print(f"fatbin_list: {path}: {e}", file=sys.stderr)
            rc = 1
            continue
        if not found:
            print(f"{path} none")
        for kind, arch in sorted(set(found)):
            print(f"{path} {kind} sm_{arch}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
