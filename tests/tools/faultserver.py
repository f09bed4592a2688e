#!/usr/bin/python3
"""A small Hugging Face-style file server for install tests, with injectable faults.

Serves DIR at /PATH/resolve/REVISION/FILE over HTTP/1.1 keep-alive with single-range support, and
misbehaves on chosen range requests to .safetensors files (counted from 1 in arrival order):

  --faults "KIND@N[xCOUNT],..."   apply KIND to the Nth (and following COUNT-1) shard range requests
    drop     send the headers and half the body, then close the connection
    500/503  answer with that status
    full200  ignore Range: 200 with the whole file
    badlen   Content-Length one byte short of the range (and that many bytes)
    stall    send half the body, then stop sending (the client must time out)
    resize   report the file one MiB larger in Content-Range (the file "changed" upstream)
    corrupt  flip one byte of the body (only a published hash can catch it)
    forbid   answer 403, as a CDN does for an expired signed URL
    wrongrange  answer with the bytes (and Content-Range) of the range one byte further on
  --meta-fault FILE=KIND  damage a whole-file answer: flip (one byte changed, same size), garble
                  (one byte made invalid for the file's syntax: '!' in place of a character),
                  truncate (half the file)
  --etag none|mtime   ETag of every file: like nginx ("mtime-size", default) or none at all
  --commit SHA    the commit the default revision is: sent as X-Repo-Commit on /resolve/ answers
  --rev NAME=DIR  serve DIR as revision NAME too (a commit of the repository), at /resolve/NAME/
  --api           answer Hugging Face's revision API, /api/models/PATH/revision/REV, with the
                  commit and every file's size, git blob SHA-1 and (shards) LFS SHA-256
  --publish-sha   send X-Linked-ETag: "<sha256>" for shards, as Hugging Face does for LFS files
  --retry-after S send Retry-After: S with 503 answers
  --redirect      answer /resolve/ URLs of shards with 302 to /cdn/FILE, as Hugging Face does for LFS
                  files (the X-Linked-ETag then rides on the 302, not on the file's response)
  --delay-ms N    wait N ms before answering each shard range request (to slow an install down)
  --log FILE      one line per request: "METHOD FILE RANGE STATUS AUTHORIZATION REVISION"
  --port N        listen on port N (default: any free port)
The port it listens on is written to --port-file once it accepts connections.
"""
import argparse, hashlib, json, os, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
COUNT = [0]
SHA = {}


def parse_faults(spec):
    out = []
    for item in filter(None, (spec or "").split(",")):
        kind, _, rest = item.partition("@")
        n, _, cnt = rest.partition("x")
        out.append((kind, int(n), int(cnt or 1)))
    return out


def fault_for(k):
    for kind, n, cnt in ARGS.fault_list:
        if n <= k < n + cnt:
            return kind
    return None


def git_sha1_of(path):
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def revisions():
    """name -> (directory, commit) for every revision served."""
    revs = {ARGS.revision: (ARGS.dir, ARGS.commit)}
    if ARGS.commit:  # as on the hub, a commit also resolves by its name
        revs[ARGS.commit] = (ARGS.dir, ARGS.commit)
    for spec in ARGS.rev:
        name, _, d = spec.partition("=")
        revs[name] = (d, name)
    return revs


META_FAULTS = {}


def damaged(path, kind):
    data = open(path, "rb").read()
    mid = len(data) // 2
    if kind == "flip":  # same size, still well-formed text: a letter changed to another letter
        i = next(i for i in range(mid, len(data)) if data[i:i + 1].isalpha())
        return data[:i] + (b"B" if data[i:i + 1] != b"B" else b"C") + data[i + 1:]
    if kind == "garble":
        return data[:mid] + b"!" + data[mid + 1:]
    if kind == "truncate":
        return data[:mid]
    raise ValueError(kind)


def sha_of(path):
    with LOCK:
        if path not in SHA:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            SHA[path] = h.hexdigest()
        return SHA[path]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, *a):
        pass

    def log(self, name, rng, status):
        if ARGS.log:
            with LOCK, open(ARGS.log, "a") as f:
                auth = (self.headers.get("Authorization") or "-").replace(" ", "_")
                rev = getattr(self, "rev", None) or "-"
                f.write(f"{self.command} {name} {rng or '-'} {status} {auth} {rev}\n")

    def simple(self, status, body=b"", retry_after=None):
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, BrokenPipeError):
            pass  # the client gave up on a faulty response: expected here

    def do_HEAD(self):
        self.do_GET()

    def api(self):
        prefix = "/api/models/" + ARGS.path + "/revision/"
        rev = self.path[len(prefix):].split("?")[0]
        revs = revisions()
        if rev not in revs or not revs[rev][1]:
            self.log("api:" + rev, None, 404)
            return self.simple(404, b'{"error":"Revision Not Found"}')
        d, commit = revs[rev]
        sib = []
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            e = {"rfilename": name, "size": os.path.getsize(p), "blobId": git_sha1_of(p)}
            if name.endswith(".safetensors"):
                e["lfs"] = {"sha256": sha_of(p), "size": os.path.getsize(p), "pointerSize": 135}
            sib.append(e)
        body = json.dumps({"id": ARGS.path, "sha": commit, "siblings": sib}).encode()
        self.log("api:" + rev, None, 200)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if ARGS.api and self.path.startswith("/api/models/" + ARGS.path + "/revision/"):
            return self.api()
        cdn = self.path.startswith("/cdn/")
        self.commit, self.rev = None, "cdn" if cdn else None
        if cdn:
            prefix, root = "/cdn/", ARGS.dir
        else:
            root = None
            for rev, (d, commit) in revisions().items():
                p = "/" + ARGS.path + "/resolve/" + rev + "/"
                if self.path.startswith(p):
                    prefix, root, self.commit, self.rev = p, d, commit, rev
            if root is None:
                self.log(self.path, None, 404)
                return self.simple(404, b"not found\n")
        if "/" in self.path[len(prefix):] or ".." in self.path:
            self.log(self.path, None, 404)
            return self.simple(404, b"not found\n")
        name = self.path[len(prefix):]
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            self.log(name, None, 404)
            return self.simple(404, b"Entry not found\n")
        if ARGS.redirect and not cdn and name.endswith(".safetensors"):
            self.log(name, self.headers.get("Range"), 302)
            self.send_response(302)
            self.send_header("Location", "/cdn/" + name)
            self.extra_headers(name, path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(path)
        rng = self.headers.get("Range")
        fault = None
        if rng and name.endswith(".safetensors"):
            with LOCK:
                COUNT[0] += 1
                fault = fault_for(COUNT[0])
        if not rng or fault == "full200":
            meta = META_FAULTS.get(name) if not rng else None
            data = None
            if meta:
                data = damaged(path, meta)
            self.log(name, rng, "200:full200" if fault else "200:" + meta if meta else 200)
            self.send_response(200)
            self.send_header("Content-Length", str(len(data) if data is not None else size))
            self.extra_headers(name, path)
            self.end_headers()
            if data is not None:
                return self.wfile.write(data) if self.command != "HEAD" else None
            return self.send_file(path, 0, size, None)
        try:
            unit, _, spec = rng.partition("=")
            a, _, b = spec.partition("-")
            a, b = int(a), min(int(b), size - 1)
            assert unit == "bytes" and 0 <= a <= b
        except Exception:
            self.log(name, rng, 416)
            return self.simple(416)
        if ARGS.delay_ms:
            time.sleep(ARGS.delay_ms / 1000)
        if fault in ("500", "503"):
            self.log(name, rng, fault + ":" + fault)
            return self.simple(int(fault), b"try again\n", ARGS.retry_after if fault == "503" else None)
        if fault == "forbid":
            self.log(name, rng, "403:forbid")
            return self.simple(403, b"Request has expired\n")
        if fault == "wrongrange" and b + 1 < size:
            a, b = a + 1, b + 1
        n = b - a + 1
        total = size + (1 << 20 if fault == "resize" else 0)
        self.log(name, rng, 206 if not fault else "206:" + fault)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{total}")
        self.send_header("Content-Length", str(n - 1 if fault == "badlen" else n))
        self.extra_headers(name, path)
        self.end_headers()
        self.send_file(path, a, n - 1 if fault == "badlen" else n, fault)

    def extra_headers(self, name, path):
        on_cdn = ARGS.redirect and self.path.startswith("/cdn/")
        if ARGS.publish_sha and name.endswith(".safetensors") and not on_cdn:
            self.send_header("X-Linked-ETag", '"' + sha_of(path) + '"')
        if self.commit and not on_cdn:
            self.send_header("X-Repo-Commit", self.commit)
        if ARGS.etag == "mtime":
            st = os.stat(path)
            self.send_header("ETag", f'"{st.st_mtime_ns:x}-{st.st_size:x}"')

    def send_file(self, path, off, n, fault):
        if self.command == "HEAD":
            return
        with open(path, "rb") as f:
            f.seek(off)
            data = f.read(n)
        if fault == "corrupt" and data:
            data = bytes([data[0] ^ 0x55]) + data[1:]
        if fault in ("drop", "stall"):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if fault == "stall":
                time.sleep(ARGS.stall_s)
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(data)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--path", default="moonshotai/Kimi-K3")
    p.add_argument("--revision", default="main")
    p.add_argument("--faults", default="")
    p.add_argument("--publish-sha", action="store_true")
    p.add_argument("--redirect", action="store_true")
    p.add_argument("--retry-after", type=int, help="Retry-After seconds sent with 503")
    p.add_argument("--stall-s", type=float, default=20)
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--log")
    p.add_argument("--meta-fault", action="append", default=[])
    p.add_argument("--etag", choices=("none", "mtime"), default="mtime")
    p.add_argument("--commit", default="")
    p.add_argument("--rev", action="append", default=[])
    p.add_argument("--api", action="store_true")
    p.add_argument("--port-file", required=True)
    p.add_argument("--port", type=int, default=0)
    ARGS = p.parse_args()
    ARGS.fault_list = parse_faults(ARGS.faults)
    for spec in ARGS.meta_fault:
        name, _, kind = spec.partition("=")
        META_FAULTS[name] = kind
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
