#!/usr/bin/python3
"""Checks an install against its source, independently of the installer's code.

usage: check_install.py ROOT SRC_DIR [--full]

Parses ROOT/deltafin-manifest.txt (version 2) and checks that it is well formed, that every file it
lists has the source's size on disk, that every byte of every recorded range equals the source's
bytes, and that every hash it records (published, or computed at download) is the file's SHA-256
(or git blob SHA-1). With --full, every source file must also be wholly present and identical.
Prints "present=N bytes, files=N, ranges=N" and exits 0, or prints the first problem and exits 1.
"""
import hashlib, os, sys


def fail(msg):
    print("check_install: " + msg)
    sys.exit(1)


def parse(path):
    lines = open(path).read().split("\n")
    if lines[0] != "deltafin-manifest 2":
        fail("bad magic")
    files, cur, left = {}, None, 0
    for ln in lines[1:]:
        if not ln:
            continue
        if left:
            a, b = map(int, ln.split())
            files[cur]["ranges"].append((a, b))
            left -= 1
        elif ln.startswith("source ") or ln.startswith("revision "):
            pass
        else:
            kw, name, size, whole, n, pub, local, verified, identity = ln.split()
            assert kw == "file", ln
            files[name] = {"size": int(size), "pub": pub, "local": local, "verified": verified == "1", "ranges": []}
            cur, left = name, int(n)
    if left:
        fail("truncated manifest")
    return files


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def git_sha1(path):
    data = open(path, "rb").read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_hashes(root, name, f):
    whole = f["ranges"] == [(0, f["size"])]
    if f["local"] != "-":
        if not whole:
            fail(f"{name}: a hash recorded for an incomplete file")
        if sha(os.path.join(root, name)) != f["local"]:
            fail(f"{name}: the recorded SHA-256 is not the file's")
    if f["verified"]:
        kind, _, want = f["pub"].partition(":")
        got = sha(os.path.join(root, name)) if kind == "sha256" else git_sha1(os.path.join(root, name))
        if got != want:
            fail(f"{name}: verified against {f['pub']}, but the file's hash is {got}")


def main():
    root, src = sys.argv[1], sys.argv[2]
    full = "--full" in sys.argv[3:]
    files = parse(os.path.join(root, "deltafin-manifest.txt"))
    present = nranges = 0
    for name, f in files.items():
        sp, ip = os.path.join(src, name), os.path.join(root, name)
        if os.path.getsize(sp) != f["size"]:
            fail(f"{name}: manifest size {f['size']} != source {os.path.getsize(sp)}")
        if f["ranges"] and os.path.getsize(ip) != f["size"]:
            fail(f"{name}: size on disk {os.path.getsize(ip)} != {f['size']}")
        last = -1
        with open(sp, "rb") as s, open(ip, "rb") as i:
            for a, b in f["ranges"]:
                if not (last < a < b <= f["size"]):
                    fail(f"{name}: range {a}-{b} out of order or bounds")
                last = b
                s.seek(a), i.seek(a)
                if s.read(b - a) != i.read(b - a):
                    fail(f"{name}: recorded range {a}-{b} differs from the source")
                present += b - a
                nranges += 1
        check_hashes(root, name, f)
    if full:
        for name in sorted(os.listdir(src)):
            if name not in files:
                fail(f"{name}: not in the manifest")
            if sha(os.path.join(src, name)) != sha(os.path.join(root, name)):
                fail(f"{name}: differs from the source")
            if files[name]["ranges"] != [(0, files[name]["size"])]:
                fail(f"{name}: not wholly recorded")
    print(f"present={present} bytes, files={len(files)}, ranges={nranges}")


main()
