#!/usr/bin/env python3
"""A kernel's SASS opcodes counted on a machine without cuobjdump or nvdisasm.

    # on the device machine (it has cuobjdump), once: learn the opcodes' encodings
    cuobjdump -sass build/mlaserve > sass.txt
    python3 bench/sass_opcodes.py learn sass.txt [more.txt ...] --map bench/sass_opcodes.json
    # here: compile one kernel file to a cubin and count its instructions by opcode
    nvcc -DMLASERVE_CUDA -Isrc -O3 -DNDEBUG --generate-code=arch=compute_90a,code=[sm_90a] \\
        -std=c++20 -x cu -cubin src/ops/cuda/attention_wgmma_kernels.cu -o /tmp/k.cubin
    python3 bench/sass_opcodes.py count /tmp/k.cubin --kernel mla_wgmma [--top 30]

An sm_90 instruction is 16 bytes; the low 12 bits of its first word name its opcode family (the
variants of one family, IADD3 and IADD3.X say, share it). `learn` maps each family seen in
cuobjdump's listing to the mnemonics printed for it; `count` reads the cubin's .text sections
(ELF, parsed here) and names each instruction by its family's most frequent mnemonic, marking a
family the map does not know by its code. Static counts, not executed ones: they show what a
change does to a kernel's code (descriptor arithmetic, moves, unrolling) before any device time
is spent on it (bench/RESULTS.md, session 33). Standard library only.
"""
import argparse
import collections
import json
import re
import struct

LINE = re.compile(r"^\s+/\*[0-9a-f]{4,5}\*/\s+(.*?)\s*;\s+/\* 0x([0-9a-f]{16}) \*/")


def learn(paths, map_path):
    families = collections.defaultdict(collections.Counter)
    try:
        with open(map_path) as f:
            for code, names in json.load(f).items():
                families[int(code, 16)].update(names)
    except FileNotFoundError:
        pass
    for path in paths:
        with open(path) as f:
            for line in f:
                m = LINE.match(line)
                if not m:
                    continue
                words = m.group(1).split()
                name = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
                families[int(m.group(2), 16) & 0xFFF][name] += 1
    with open(map_path, "w") as f:
        json.dump({f"{k:03x}": dict(v) for k, v in sorted(families.items())}, f, indent=0,
                  sort_keys=True)
        f.write("\n")
    print(f"{map_path}: {len(families)} opcode families")


def text_sections(data):
    """(name, bytes) of each .text.* section of an ELF64 little-endian file."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]
    for h in headers:
        name = names[h[0]:names.index(b"\0", h[0])].decode()
        if name.startswith(".text."):
            yield name[len(".text."):], data[h[4]:h[4] + h[5]]


def count(cubin, map_path, kernel, top):
    with open(map_path) as f:
        families = {int(k, 16): v for k, v in json.load(f).items()}
    with open(cubin, "rb") as f:
        data = f.read()
    for name, text in text_sections(data):
        if kernel and kernel not in name:
            continue
        ops = collections.Counter()
        for i in range(0, len(text), 16):
            code = int.from_bytes(text[i:i + 8], "little") & 0xFFF
            names = families.get(code)
            ops[max(names, key=names.get) if names else f"?{code:03x}"] += 1
        print(f"{name}: {len(text) // 16} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in ops.most_common(top)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("learn", help="map opcode families from cuobjdump -sass listings")
    a.add_argument("listings", nargs="+")
    a.add_argument("--map", default="bench/sass_opcodes.json")
    c = sub.add_parser("count", help="count a cubin's instructions by opcode")
    c.add_argument("cubin")
    c.add_argument("--map", default="bench/sass_opcodes.json")
    c.add_argument("--kernel", default="", help="only kernels whose mangled name holds this")
    c.add_argument("--top", type=int, default=40)
    args = p.parse_args()
    if args.cmd == "learn":
        learn(args.listings, args.map)
    else:
        count(args.cubin, args.map, args.kernel, args.top)


if __name__ == "__main__":
    main()
