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
  --publish-sha   send X-Linked-ETag: "<sha256>" for shards, as Hugging Face does for LFS files
  --retry-after S send Retry-After: S with 503 answers
  --redirect      answer /resolve/ URLs of shards with 302 to /cdn/FILE, as Hugging Face does for LFS
                  files (the X-Linked-ETag then rides on the 302, not on the file's response)
  --delay-ms N    wait N ms before answering each shard range request (to slow an install down)
  --log FILE      one line per request: "METHOD FILE RANGE STATUS AUTHORIZATION"
The port it listens on is written to --port-file once it accepts connections.
"""
import argparse, hashlib, os, socket, sys, threading, time
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
                f.write(f"{self.command} {name} {rng or '-'} {status} {auth}\n")

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

    def do_GET(self):
        prefix = "/" + ARGS.path + "/resolve/" + ARGS.revision + "/"
        cdn = self.path.startswith("/cdn/")
        if cdn:
            prefix = "/cdn/"
        if not self.path.startswith(prefix) or "/" in self.path[len(prefix):] or ".." in self.path:
            self.log(self.path, None, 404)
            return self.simple(404, b"not found\n")
        name = self.path[len(prefix):]
        path = os.path.join(ARGS.dir, name)
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
            self.log(name, rng, "200:full200" if fault else 200)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.extra_headers(name, path)
            self.end_headers()
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
        if ARGS.publish_sha and name.endswith(".safetensors") and not (ARGS.redirect and self.path.startswith("/cdn/")):
            self.send_header("X-Linked-ETag", '"' + sha_of(path) + '"')

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
    p.add_argument("--port-file", required=True)
    ARGS = p.parse_args()
    ARGS.fault_list = parse_faults(ARGS.faults)
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
