"""Raw HTTP checks of `deltafin serve` (no SDK in the way): malformed and mistyped bodies,
limits, authentication, slow and vanished clients, concurrency, the memo, token caps and memory
over many requests, crowds of slow clients. Usage: serve_http.py DF MODEL_DIR SCRATCH GROUP
(GROUP: http | slow | soak | asan)."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

DF, MODEL, SCRATCH, GROUP = sys.argv[1:5]
MODEL_ID = "deltafin-kimi-k3"


class Server:
    def __init__(self, *args, env=None, binary=None):
        self.log_path = os.path.join(SCRATCH, "serve-%d.log" % time.monotonic_ns())
        self.logf = open(self.log_path, "w")
        e = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen([binary or DF, "serve", "--model", MODEL, "--port", "0", "--alias", MODEL_ID, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.logf, env=e)
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                return
            assert self.proc.poll() is None, self.log()
            time.sleep(0.05)
        raise AssertionError("server did not start: " + self.log())

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def lines(self, path=None):
        return [l for l in self.log().splitlines() if l.startswith("serve: ") and (path is None or path in l)]

    def wait_lines(self, n, path=None):
        """The request log lines once there are at least n (a line is written just after the answer)."""
        deadline = time.time() + 10
        while len(self.lines(path)) < n:
            assert time.time() < deadline, self.log()
            time.sleep(0.02)
        return self.lines(path)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self.logf.close()
        return code

    def request(self, method, path, body=None, headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        c.close()
        try:
            j = json.loads(payload)
        except ValueError:
            j = None
        return r.status, dict(r.getheaders()), j, payload

    def chat(self, **kw):
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hello"}], **kw}
        return self.request("POST", "/v1/chat/completions", body)

    def complete(self, **kw):
        return self.request("POST", "/v1/completions", {"model": MODEL_ID, "prompt": "hello", **kw})


def expect_error(resp, status, param=None, code=None):
    st, _, j, raw = resp
    assert st == status, (st, raw)
    err = j["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err


def raw_socket(port):
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def post_bytes(body, path="/v1/completions"):
    return (b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), len(body)) + body)


def read_to_end(s):
    """Everything a socket receives until the server closes it."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def read_events(s, n):
    """Reads from a socket until n SSE data events have arrived."""
    data = b""
    while data.count(b"data: ") < n:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    return data


def check_validation(srv):
    expect_error(srv.request("POST", "/v1/chat/completions", raw=b'{"model": "deltafin-kimi-k3", "messages": ['), 400,
                 code="invalid_json")
    expect_error(srv.request("POST", "/v1/chat/completions", raw=b"[1, 2]"), 400, code="invalid_type")
    expect_error(srv.request("POST", "/v1/chat/completions", raw=b""), 400)
    for field, value in [("temperature", "hot"), ("temperature", 2.5), ("top_p", -0.1), ("max_tokens", 0),
                         ("max_tokens", 1.5), ("stream", "yes"), ("n", 3), ("logprobs", 1), ("seed", "1"),
                         ("presence_penalty", 3), ("frequency_penalty", -2.5), ("top_k", 1.5), ("min_p", 2),
                         ("logit_bias", {"a": 1}), ("logit_bias", {"1": 200}), ("logit_bias", {"100000000": 1}),
                         ("top_logprobs", 2), ("stop", 5), ("stop", ["a", "b", "c", "d", "e"]),
                         ("stop", [""]), ("stop", ["x", 1]), ("tools", "x"), ("tools", [1]),
                         ("tool_choice", "required"), ("tool_choice", {"type": "function"}), ("functions", []),
                         ("reasoning_effort", "extreme"), ("metadata", {"k": 1}),
                         ("response_format", {"type": "xml"}), ("response_format", "json"), ("user", 5)]:
        expect_error(srv.chat(**{field: value}), 400, param=field)
    expect_error(srv.chat(messages=[]), 400, param="messages")
    expect_error(srv.chat(messages=[{"content": "no role"}]), 400, param="messages[0].role")
    expect_error(srv.chat(messages=[{"role": "user", "content": 7}]), 400, param="messages[0].content")
    expect_error(srv.chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
                 400, param="messages[0].content[0].type")
    expect_error(srv.chat(model="gpt-4"), 404, param="model", code="model_not_found")
    expect_error(srv.request("POST", "/v1/chat/completions", {"messages": []}), 400, param="model")
    for field, value in [("prompt", 5), ("prompt", ""), ("prompt", ["a", "b"]), ("echo", True), ("best_of", 2),
                         ("suffix", "x"), ("max_tokens", -1), ("logprobs", 9)]:
        expect_error(srv.complete(**{field: value}), 400, param=field)
    expect_error(srv.complete(prompt=[1, 10 ** 6]), 400, param="prompt")
    # unknown fields are ignored; null means "not set"; what stock clients send is accepted
    st, _, j, _ = srv.chat(max_tokens=2, some_future_field={"x": 1}, temperature=None, top_p=0.5, seed=4, user="u",
                           metadata={"k": "v"}, store=False, reasoning_effort="medium",
                           stream_options={"include_usage": True}, max_completion_tokens=3,
                           messages=[{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert st == 200 and j["usage"]["completion_tokens"] <= 2, j
    # developer is system: the same prompt tokens
    st, _, k, _ = srv.chat(max_tokens=1, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                           reasoning_effort="high")
    st, _, d, _ = srv.chat(max_tokens=1, messages=[{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}],
                           reasoning_effort="high")
    assert k["usage"]["prompt_tokens"] == d["usage"]["prompt_tokens"], (k, d)
    # a JSON NUL is refused in plain words
    st, _, j, _ = srv.request("POST", "/v1/completions", raw=b'{"model": "deltafin-kimi-k3", "prompt": "a\\u0000b"}')
    assert st == 400 and "NUL" in j["error"]["message"] and "JSON_ALLOW_NUL" not in j["error"]["message"], j
    # routing
    expect_error(srv.request("GET", "/v1/nothing"), 404)
    expect_error(srv.request("GET", "/v1/models%00.json"), 404)  # %00 does not cut the path short
    st, h, _, body = srv.request("HEAD", "/v1/models")
    assert st == 200 and body == b"" and int(h["Content-Length"]) > 0, (st, h, body)
    st, h, j, _ = srv.request("DELETE", "/v1/models")
    assert st == 405 and h.get("Allow") == "GET, HEAD", (st, h)
    st, h, _, _ = srv.request("GET", "/v1/chat/completions")
    assert st == 405 and h.get("Allow") == "POST", (st, h)


def check_body_limit(srv):
    # a declared oversized body is refused before it is read: the answer comes at once
    s = raw_socket(srv.port)
    t0 = time.time()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 50000000\r\n\r\n{\"model\":")
    head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert time.time() - t0 < 2
    s.close()
    # a chunked body that grows past the limit is refused too (and not kept in memory)
    s = raw_socket(srv.port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    try:
        for _ in range(40):
            s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    assert s.recv(4096).startswith(b"HTTP/1.1 413")
    s.close()


def http_exchange(s, data):
    """Sends data on socket s and reads one whole response (Content-Length framed)."""
    s.sendall(data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?i)content-length: (\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk
        rest += chunk
    return head.decode(), rest[:n]


def check_http_details(srv):
    """Keep-alive, HEAD, ambiguous lengths, /health and /metrics, no CORS unless asked for."""
    s = raw_socket(srv.port)
    for path in (b"/v1/models", b"/health", b"/v1/nothing"):  # errors answered once the body is in keep it open too
        head, body = http_exchange(s, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path)
        assert "connection: close" not in head.lower() and "Access-Control" not in head, head
    head, body = http_exchange(s, post_bytes(json.dumps({"model": MODEL_ID, "prompt": "keep", "max_tokens": 2}).encode()))
    assert head.startswith("HTTP/1.1 200") and json.loads(body)["usage"]["completion_tokens"] == 2, (head, body)
    head, body = http_exchange(s, b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")  # still the same connection
    assert head.startswith("HTTP/1.1 200"), head
    s.close()
    for lengths in (b"Content-Length: 5\r\nContent-Length: 50\r\n", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"):
        s = raw_socket(srv.port)
        head, body = http_exchange(s, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + lengths + b"\r\nhello")
        assert head.startswith("HTTP/1.1 400") and json.loads(body)["error"]["code"] == "invalid_content_length", head
        s.close()
    st, _, j, _ = srv.request("GET", "/health")
    assert st == 200 and j["status"] == "ok"
    st, h, _, raw = srv.request("OPTIONS", "/v1/chat/completions")
    assert st == 204 and h["Allow"] == "POST, OPTIONS" and "Access-Control-Allow-Origin" not in h, h
    st, h, _, raw = srv.request("GET", "/metrics")
    assert st == 200 and h["Content-Type"].startswith("text/plain; version=0.0.4"), h
    text = raw.decode()
    values = dict(re.findall(r"^(deltafin_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", text, re.M))
    for name in ("deltafin_generations_total", "deltafin_prompt_tokens_total", "deltafin_completion_tokens_total",
                 "deltafin_queue_depth", "deltafin_prompt_tokens_cached_total", 'deltafin_read_bytes_total{part="experts"}',
                 "deltafin_seconds_per_token", 'deltafin_requests_total{code="200"}', "deltafin_expert_cache_hits_total",
                 "deltafin_slots", "deltafin_seconds_per_pass", "deltafin_generating"):
        assert name in values, (name, text[:2000])
    assert float(values["deltafin_generations_total"]) >= 1 and float(values["deltafin_completion_tokens_total"]) >= 2
    assert float(values['deltafin_requests_total{code="404"}']) >= 1
    for line in text.splitlines():  # every line is a comment or "name[{labels}] value"
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or re.fullmatch(r'deltafin_[a-z_]+(\{[a-z_]+="[^"]*"\})? \S+', line), line
    check_histograms(text, float(values["deltafin_generations_total"]))


def check_histograms(text, generations):
    """Latency histograms in Prometheus' form: buckets that never fall, +Inf equal to the count,
    one observation per generation for the end-to-end and first-token ones."""
    for name in ("deltafin_time_to_first_token_seconds", "deltafin_time_per_output_token_seconds",
                 "deltafin_request_duration_seconds"):
        assert "# TYPE %s histogram" % name in text, name
        buckets = [(le, float(v)) for le, v in re.findall(r'^%s_bucket\{le="([^"]+)"\} (\S+)$' % name, text, re.M)]
        assert len(buckets) >= 10 and buckets[-1][0] == "+Inf", (name, buckets)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (name, counts)  # cumulative
        count = float(re.search(r"^%s_count (\S+)$" % name, text, re.M).group(1))
        total = float(re.search(r"^%s_sum (\S+)$" % name, text, re.M).group(1))
        assert counts[-1] == count and total > 0, (name, counts, count, total)
        if name != "deltafin_time_per_output_token_seconds":
            assert count == generations, (name, count, generations)


def check_cors():
    srv = Server("--cors-origin", "https://app.example.com")
    try:
        st, h, _, _ = srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
        assert st == 204 and h["Access-Control-Allow-Origin"] == "https://app.example.com", h
        assert h["Access-Control-Allow-Methods"] == "POST, OPTIONS", h
        assert h["Access-Control-Allow-Headers"] == "authorization, content-type, x-stainless-os", h
        st, h, _, _ = srv.chat(max_tokens=1)
        assert st == 200 and h["Access-Control-Allow-Origin"] == "https://app.example.com" and h["Vary"] == "Origin", h
        st, h, _, _ = srv.request("POST", "/v1/chat/completions", {"model": MODEL_ID, "stream": True, "max_tokens": 1,
                                                                   "messages": [{"role": "user", "content": "x"}]})
        assert st == 200 and h["Access-Control-Allow-Origin"] == "https://app.example.com", h
    finally:
        assert srv.stop() == 0
    for bad in ("https://app.example.com/path", "ftp://x", "https://a b"):
        r = subprocess.run([DF, "serve", "--model", MODEL, "--port", "0", "--cors-origin", bad], capture_output=True, text=True)
        assert r.returncode != 0 and "--cors-origin" in r.stderr, r.stderr


def check_api_key():
    srv = Server(env={"DELTAFIN_API_KEY": "sekrit"})
    try:
        expect_error(srv.request("GET", "/v1/models"), 401, code="invalid_api_key")
        expect_error(srv.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
        expect_error(srv.request("GET", "/v1/models", headers={"Authorization": "Bearer sekri"}), 401)
        expect_error(srv.chat(), 401)
        st, _, j, _ = srv.request("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})
        assert st == 200 and j["data"][0]["id"] == MODEL_ID
        assert "API key required" in srv.log()
    finally:
        assert srv.stop() == 0
    srv = Server("--api-key", "k2")  # the flag works as well
    try:
        expect_error(srv.request("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"}), 401)
        assert srv.request("GET", "/v1/models", headers={"Authorization": "Bearer k2"})[0] == 200
        assert srv.request("GET", "/v1/models", headers={"x-api-key": "k2"})[0] == 200  # Anthropic clients' header
        assert srv.request("GET", "/v1/models", headers={"x-api-key": "k3"})[0] == 401
        assert srv.request("GET", "/health")[0] == 200  # health checks need no key
        expect_error(srv.request("GET", "/metrics"), 401)
    finally:
        assert srv.stop() == 0
    # an empty key would serve without authentication: refused, from the flag or the environment
    for args, env in ((["--api-key", ""], {}), ([], {"DELTAFIN_API_KEY": ""}), (["--api-key", "a b"], {})):
        r = subprocess.run([DF, "serve", "--model", MODEL, "--port", "0", *args], capture_output=True, text=True,
                           env=dict(os.environ, **env), timeout=60)
        assert r.returncode != 0 and ("empty" in r.stderr or "visible" in r.stderr), (args, env, r.stderr)


def check_slow_client():
    srv = Server("--header-timeout", "1", "--body-timeout", "1", "--timeout", "30")
    try:
        slow = raw_socket(srv.port)
        t0 = time.time()
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")  # ... and nothing more
        # others are served meanwhile, at full speed
        for _ in range(5):
            t = time.time()
            assert srv.chat(max_tokens=2)[0] == 200
            assert time.time() - t < 1.5
        slow.settimeout(10)
        assert slow.recv(100) == b""  # closed by the server
        waited = time.time() - t0
        assert 0.7 < waited < 4, waited
        # nor can a client keep its connection by trickling a byte at a time
        trickle = raw_socket(srv.port)
        t0 = time.time()
        try:
            for ch in b"GET /v1/models HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 100:
                trickle.sendall(bytes([ch]))
                time.sleep(0.25)
                assert time.time() - t0 < 6, "a trickling client was never cut off"
        except OSError:
            pass
        trickle.settimeout(5)
        try:
            assert trickle.recv(100) == b""
        except ConnectionResetError:
            pass
        assert 0.7 < time.time() - t0 < 4
        # nor by trickling the body once the headers are in
        trickle = raw_socket(srv.port)
        t0 = time.time()
        try:
            trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 200\r\n\r\n")
            for _ in range(200):
                trickle.sendall(b" ")
                time.sleep(0.25)
                assert time.time() - t0 < 6, "a client trickling its body was never cut off"
        except OSError:
            pass
        assert 0.7 < time.time() - t0 < 4
        # an idle kept-alive connection may wait longer than the header deadline
        s = raw_socket(srv.port)
        http_exchange(s, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        time.sleep(2)
        head, _ = http_exchange(s, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith("HTTP/1.1 200"), head
        s.close()
        # a generation that lasts longer than the idle timeout is not cut
        t0 = time.time()
        st, _, j, _ = srv.complete(max_tokens=8000)
        assert st == 200 and j["usage"]["completion_tokens"] == 8000
        assert time.time() - t0 > 1, "the generation was too short to test this"
    finally:
        assert srv.stop() == 0
    assert re.search(r", [123] cut for arriving too slowly", srv.log()), srv.log()[-300:]


def run_ids(ids, n):
    out = subprocess.run([DF, "run", "--model", MODEL, "--tokens", " ".join(map(str, ids)), "--max-new", str(n)],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def detok(ids):
    return subprocess.run([DF, "detokenize", "--model", MODEL], input=" ".join(map(str, ids)), check=True,
                          capture_output=True, text=True).stdout


def check_prefix_reuse(srv):
    """A prompt that extends what the server's State holds only prefills the new tokens, and the
    answer is still exactly run's for the whole prompt."""
    first = [7, 8, 9, 10, 11, 12]
    gen = run_ids(first, 3)
    st, _, j, _ = srv.complete(prompt=first, max_tokens=3)
    assert st == 200 and j["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # the State now holds first + gen[:2] (the last token is never fed)
    second = first + gen[:2] + [20, 21]
    st, _, j, _ = srv.complete(prompt=second, max_tokens=4)
    assert st == 200, j
    assert j["usage"]["prompt_tokens_details"]["cached_tokens"] == len(first) + 2, j["usage"]
    assert j["choices"][0]["text"] == detok(run_ids(second, 4))
    assert "cached=%d " % (len(first) + 2) in srv.wait_lines(1, "cached=%d " % (len(first) + 2))[0]


def check_stop_sequences(srv):
    """`stop` cuts the answer before the first occurrence of any sequence, whole or streamed."""
    ids = [30, 31, 32, 33]
    full = detok(run_ids(ids, 40))
    start = len(full) // 3
    seq = full[start:start + 3]
    want = full[:full.find(seq)]
    for stop in (seq, [seq], ["\u2603 never", seq]):
        st, _, j, _ = srv.complete(prompt=ids, max_tokens=40, stop=stop)
        assert st == 200 and j["choices"][0]["text"] == want, (stop, j, want)
        assert j["choices"][0]["finish_reason"] == "stop" and j["usage"]["completion_tokens"] < 40
        st, _, _, raw = srv.request("POST", "/v1/completions", {"model": MODEL_ID, "prompt": ids, "max_tokens": 40,
                                                                "stop": stop, "stream": True})
        events = [json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]
        assert "".join(e["choices"][0]["text"] for e in events) == want
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
    # a sequence that never occurs changes nothing
    st, _, j, _ = srv.complete(prompt=ids, max_tokens=40, stop=["\u2603\u2603 not there"])
    assert j["choices"][0]["text"] == full and j["choices"][0]["finish_reason"] == "length"


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}]


def tokenize_chat(request):
    path = os.path.join(SCRATCH, "chat-%d.json" % time.monotonic_ns())
    with open(path, "w") as f:
        json.dump(request, f)
    out = subprocess.run([DF, "tokenize", "--model", MODEL, "--chat", path], check=True, capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def check_tools(srv):
    """Tool declarations and a conversation with a call and its result render as K3 expects them
    (same prompt ids as `deltafin tokenize --chat`); tool_choice none and required are kept."""
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    st, _, j, _ = srv.chat(messages=msgs, tools=TOOLS, tool_choice="auto", max_tokens=3)
    assert st == 200, j
    assert j["usage"]["prompt_tokens"] == len(tokenize_chat({"messages": msgs, "tools": TOOLS}))
    assert j["usage"]["prompt_tokens"] > len(tokenize_chat({"messages": msgs}))
    turn2 = msgs + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}]
    st, _, j, _ = srv.chat(messages=turn2, tools=TOOLS, max_tokens=3)
    assert st == 200, j
    assert j["usage"]["prompt_tokens"] == len(tokenize_chat({"messages": turn2, "tools": TOOLS}))
    st, _, j, _ = srv.chat(messages=msgs, tools=TOOLS, tool_choice="none", max_tokens=5)  # no call can be made
    assert st == 200 and "tool_calls" not in j["choices"][0]["message"], j
    st, _, j, _ = srv.chat(messages=msgs, tools=TOOLS, tool_choice="required", max_tokens=200)  # a call must be made
    assert st == 200 and j["choices"][0]["finish_reason"] == "tool_calls", j
    assert json.loads(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["city"] is not None
    expect_error(srv.chat(messages=[{"role": "assistant", "tool_calls": "x"}]), 400, param="messages[0].tool_calls")


def check_busy_and_disconnect(srv):
    """429 while busy, with a Retry-After from measured work: the running generation is expected
    to be as long as the ones that finished (a running mean), not as long as its budget; a
    client that hangs up stops its generation."""
    for i in range(3):  # finished generations of 40 tokens: the mean the estimate starts from
        assert srv.complete(prompt="short %d" % i, max_tokens=40)[0] == 200
    budget = 60000  # within the default context (65536)
    s = raw_socket(srv.port)
    s.sendall(post_bytes(json.dumps({"model": MODEL_ID, "prompt": "a long one", "max_tokens": budget,
                                     "stream": True}).encode()))
    read_events(s, 20)  # enough tokens for a pace
    st, h, j, _ = srv.chat(max_tokens=2, messages=[{"role": "user", "content": "am I turned away?"}])
    assert st == 429 and j["error"]["type"] == "rate_limit_error", (st, h, j)
    assert re.fullmatch(r"[1-9][0-9]*", h["Retry-After"]), h
    retry = int(h["Retry-After"])
    s.close()  # hang up mid-stream
    # the generation stops: the model is free at once and the log says why it stopped
    deadline = time.time() + 5
    while True:
        lines = srv.lines("client-disconnected")
        if lines:
            break
        assert time.time() < deadline, srv.log()
        time.sleep(0.05)
    m = re.search(r"completion=(\d+) finish=aborted .* model=([0-9.]+)s", lines[-1])
    assert m and int(m.group(1)) < budget, lines
    # the estimate: about the 40-token mean at the pace the log shows (noisy machine: a factor 2
    # and a second of rounding); the budget's (60000 tokens left) would have been far more
    done, pace = int(m.group(1)), float(m.group(2)) / int(m.group(1))
    assert retry <= 2 * 40 * pace + 1, (retry, done, pace)
    assert (budget - done) * pace > 4 * retry, ("too fast to tell the estimate from the budget's", retry, done, pace)
    print("Retry-After %d s with %d of %d tokens done at %.2f ms/token (the budget would say %.0f s)" %
          (retry, done, budget, pace * 1e3, (budget - done) * pace))
    assert srv.chat(max_tokens=2)[0] == 200
    # a client that hangs up during a whole (non-streamed) answer stops it too
    s = raw_socket(srv.port)
    s.sendall(post_bytes(json.dumps({"model": MODEL_ID, "prompt": "whole", "max_tokens": 8000}).encode()))
    time.sleep(0.2)
    s.close()
    deadline = time.time() + 5
    while len(srv.lines("client-disconnected")) < 2:
        assert time.time() < deadline, srv.log()
        time.sleep(0.05)
    assert srv.chat(max_tokens=2)[0] == 200


def check_shutdown():
    """Stopping drains: a short generation running finishes; a long one is ended once
    --drain-timeout has passed, a stream with an error event and [DONE], a whole answer with a
    503; a request on a kept-alive connection meanwhile gets 503; the log and the summary count
    them as cut by the shutdown, not as client disconnects."""
    srv = Server("--parallel", "3", "--queue", "0", "--drain-timeout", "3")
    try:
        keep = raw_socket(srv.port)
        head, _ = http_exchange(keep, b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")
        assert head.startswith("HTTP/1.1 200"), head
        stream = raw_socket(srv.port)
        stream.sendall(post_bytes(json.dumps({"model": MODEL_ID, "prompt": "long", "max_tokens": 60000,
                                              "stream": True}).encode()))
        read_events(stream, 3)
        whole = raw_socket(srv.port)
        whole.sendall(post_bytes(json.dumps({"model": MODEL_ID, "prompt": "whole", "max_tokens": 60000}).encode()))
        results = {}
        short = threading.Thread(target=lambda: results.update(short=srv.complete(prompt="short", max_tokens=300)))
        short.start()
        time.sleep(0.3)
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        head, body = http_exchange(keep, post_bytes(json.dumps({"model": MODEL_ID, "prompt": "late", "max_tokens": 2}).encode()))
        assert head.startswith("HTTP/1.1 503") and "retry-after:" in head.lower() and "connection: close" in head.lower(), head
        assert json.loads(body)["error"]["code"] == "server_stopping", body
        data = read_to_end(stream)
        # the stream ends properly: an error event, [DONE], the last chunk of the chunked body
        assert b'"code":"server_shutdown"' in data[-1000:] and b"data: [DONE]\n\n" in data[-200:], data[-600:]
        assert data.endswith(b"0\r\n\r\n"), data[-100:]
        reply = read_to_end(whole)
        assert reply.startswith(b"HTTP/1.1 503") and b"server_shutdown" in reply, reply[:300]
        short.join(30)
        assert results["short"][0] == 200, results
        assert results["short"][2]["usage"]["completion_tokens"] == 300
    finally:
        code = srv.proc.wait(60)
        srv.logf.close()
    log = srv.log()
    assert code == 0, log[-2000:]
    assert len(re.findall(r"finish=shutdown", log)) == 2 and "client-disconnected" not in log, log[-3000:]
    assert re.search(r"stopped after \d+ requests: .* 0 stopped by a client disconnect, 2 cut by the shutdown, .* "
                     r"1 refused while stopping \(503\)", log), log[-1500:]


def check_listen_before_loading():
    """A busy port is refused before the model is read: the error comes first and alone."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    t0 = time.time()
    p = subprocess.run([DF, "serve", "--model", MODEL, "--port", str(port)], capture_output=True, text=True, timeout=60)
    s.close()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "cannot listen on 127.0.0.1:%d" % port in p.stderr and "in use" in p.stderr, p.stderr
    assert "deltafin: model " not in p.stderr, p.stderr  # no start-up line: the model was never opened
    print("busy port refused in %.2f s" % (time.time() - t0))


def check_queue():
    srv = Server("--parallel", "1", "--queue", "2")
    try:
        results = {}

        def go(name, n):
            results[name] = srv.complete(prompt="queue " + name, max_tokens=n)

        threads = [threading.Thread(target=go, args=(name, n)) for name, n in (("a", 6000), ("b", 5), ("c", 5))]
        for t in threads:  # a takes the model, b then c wait in the queue
            t.start()
            time.sleep(0.15)
        overflow = srv.complete(prompt="overflow", max_tokens=2)  # the queue is full while b and c wait
        for t in threads:
            t.join()
        assert all(results[k][0] == 200 for k in "abc"), results
        lines = srv.wait_lines(4, "/v1/completions")
        turn, wait = {}, {}
        for k in "abc":
            line = next(l for l in lines if "id=%s " % results[k][2]["id"] in l)
            turn[k] = int(re.search(r" seq=(\d+) ", line).group(1))
            wait[k] = float(re.search(r" wait=([0-9.]+)s", line).group(1))
        assert turn["a"] < turn["b"] < turn["c"], (turn, lines)
        assert wait["b"] > 0.1 and wait["c"] > 0.1, wait  # they did wait in the queue
        assert results["a"][2]["usage"]["completion_tokens"] == 6000
        assert overflow[0] == 429 and "queue is full" in overflow[2]["error"]["message"], overflow
    finally:
        assert srv.stop() == 0


def check_memo_and_caps():
    srv = Server(env={"K3_SERVER_MAX_TOKENS": "7", "K3_RESPONSE_MEMO_ENTRIES": "2"})
    try:
        a = srv.complete(prompt="memo me", max_tokens=50)
        b = srv.complete(prompt="memo me", max_tokens=50)
        assert a[0] == b[0] == 200
        assert a[2]["usage"]["completion_tokens"] == 7 and a[2]["choices"][0]["finish_reason"] == "length"
        assert a[2]["choices"] == b[2]["choices"] and a[2]["usage"] == b[2]["usage"]
        assert a[2]["id"] != b[2]["id"]
        lines = srv.wait_lines(2, "/v1/completions")
        assert sum(l.endswith(" memo") for l in lines) == 1, lines  # (log lines come in completion order)
        # a streamed replay carries the same text
        st, _, _, raw = srv.request("POST", "/v1/completions", {"model": MODEL_ID, "prompt": "memo me",
                                                                "max_tokens": 50, "stream": True})
        text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in raw.decode().split("\n\n")
                       if e.startswith("data: {"))
        assert text == a[2]["choices"][0]["text"]
        # chats are capped too; the memo holds 2 entries, least recently used goes first
        c = srv.chat()
        assert c[2]["usage"]["completion_tokens"] <= 7
        srv.complete(prompt="other", max_tokens=3)
        srv.complete(prompt="memo me", max_tokens=50)
        assert not srv.wait_lines(6, "/v1/")[-1].endswith(" memo")
    finally:
        assert srv.stop() == 0
    srv = Server(env={"K3_RESPONSE_MEMO_ENTRIES": "0"})
    try:
        srv.complete(max_tokens=3)
        srv.complete(max_tokens=3)
        assert not any(l.endswith(" memo") for l in srv.wait_lines(2, "/v1/"))
    finally:
        assert srv.stop() == 0


def check_messages_api(srv):
    """/v1/messages over raw HTTP, whole and streamed, and its errors (the SDK test covers the rest)."""
    body = {"model": MODEL_ID, "max_tokens": 5, "system": "S", "messages": [{"role": "user", "content": "hi"}]}
    st, _, j, _ = srv.request("POST", "/v1/messages", body)
    assert st == 200 and j["type"] == "message" and j["usage"]["output_tokens"] == 5, j
    st, h, _, raw = srv.request("POST", "/v1/messages", dict(body, stream=True))
    assert st == 200 and h["Content-Type"] == "text/event-stream", h
    names = re.findall(r"^event: (\w+)$", raw.decode(), re.M)
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    st, _, j, _ = srv.request("POST", "/v1/messages", dict(body, max_tokens=None))
    assert st == 400 and j["type"] == "error" and j["error"]["type"] == "invalid_request_error", j
    st, _, j, _ = srv.request("POST", "/v1/messages", raw=b"{nope")
    assert st == 400 and j["type"] == "error", j


class Trickler(threading.Thread):
    """A client that opens a connection from `source`, sends a request's headers one byte every
    `every` seconds and reconnects whenever the server closes it."""
    def __init__(self, port, source, every, stop):
        super().__init__(daemon=True)
        self.port, self.source, self.every, self.stop = port, source, every, stop
        self.connects = 0

    def run(self):
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(self.source, 0))
                self.connects += 1
                for ch in b"GET /v1/models HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 1000:
                    s.sendall(bytes([ch]))
                    if self.stop.wait(self.every):
                        break
                s.close()
            except OSError:
                self.stop.wait(0.05)


def honest_requests(srv, n, every):
    """n requests from 127.0.0.1, one every `every` seconds; returns (served, slowest seconds)."""
    served, slowest = 0, 0.0
    for i in range(n):
        t = time.time()
        try:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
            if i % 2:
                c.request("GET", "/v1/models")
            else:
                c.request("POST", "/v1/completions", body=json.dumps({"model": MODEL_ID, "prompt": "hi %d" % i,
                                                                      "max_tokens": 2}), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            c.close()
            served += r.status == 200
        except OSError:
            pass
        slowest = max(slowest, time.time() - t)
        time.sleep(every)
    return served, slowest


def check_slow_crowd(sources, per_source):
    """A crowd trickling header bytes (every 2 s, reconnecting when cut) from `sources` addresses
    must not lock honest clients out at the default settings."""
    srv = Server()
    stop = threading.Event()
    crowd = [Trickler(srv.port, src, 2.0, stop) for src in sources for _ in range(per_source)]
    try:
        for t in crowd:
            t.start()
        time.sleep(3)  # the crowd holds its connections
        served, slowest = honest_requests(srv, 24, 0.4)
        print("%d tricklers from %d addresses: %d of 24 honest requests served, slowest %.2f s" %
              (len(crowd), len(sources), served, slowest))
        assert served == 24, (served, srv.log()[-2000:])
        assert slowest < 5, slowest
    finally:
        stop.set()
        for t in crowd:
            t.join(10)
        assert srv.stop() == 0
    return srv.log()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def soak(srv, n):
    """n sequential requests of every kind; returns the RSS after each tenth."""
    rss = []
    for i in range(n):
        k = i % 5
        if k == 0:
            assert srv.chat(max_tokens=4, messages=[{"role": "user", "content": "turn %d" % i}])[0] == 200
        elif k == 1:
            st, _, _, raw = srv.request("POST", "/v1/chat/completions", {
                "model": MODEL_ID, "messages": [{"role": "user", "content": "s %d" % i}], "max_tokens": 4,
                "stream": True, "stream_options": {"include_usage": True}})
            assert st == 200 and raw.endswith(b"data: [DONE]\n\n")
        elif k == 2:
            assert srv.complete(prompt="p %d" % i, max_tokens=4)[0] == 200
        elif k == 3:
            assert srv.chat(temperature="bad")[0] == 400
        else:
            s = raw_socket(srv.port)
            s.sendall(post_bytes(json.dumps({"model": MODEL_ID, "prompt": "d %d" % i, "max_tokens": 500,
                                             "stream": True}).encode()))
            read_events(s, 1)
            s.close()
            assert srv.request("GET", "/v1/models")[0] == 200
            srv.wait_lines(i // 5 + 1, "client-disconnected")  # the abandoned generation stopped
        if i % 10 == 9:
            rss.append(rss_kb(srv.proc.pid))
    return rss


if GROUP == "http":
    srv = Server("--max-body", "1000000", "--parallel", "1", "--queue", "0")
    try:
        check_validation(srv)
        check_body_limit(srv)
        check_prefix_reuse(srv)
        check_stop_sequences(srv)
        check_tools(srv)
        check_http_details(srv)
        check_messages_api(srv)
        check_busy_and_disconnect(srv)
    finally:
        assert srv.stop() == 0
    assert "stopped by a client disconnect" in srv.log()
    check_cors()
    check_api_key()
    check_slow_client()
    check_queue()
    check_memo_and_caps()
    check_shutdown()
    check_listen_before_loading()
elif GROUP == "slow":
    # 64 tricklers from one address: the per-client limit keeps them to a quarter of the connections
    log = check_slow_crowd(["127.0.0.2"], 64)
    # 64 from eight addresses fill every connection: newcomers get the room of the oldest waiting
    log = check_slow_crowd(["127.0.0.%d" % i for i in range(2, 10)], 8)
    assert re.search(r", [1-9][0-9]* closed to make room for new clients", log), log[-500:]
elif GROUP == "soak":
    srv = Server()
    try:
        rss = soak(srv, 200)
    finally:
        assert srv.stop() == 0
    print("RSS (kB) every 10 requests:", rss)
    growth = rss[-1] - rss[2]
    assert growth < 1024, ("RSS grew by %d kB over 170 requests" % growth, rss)
    m = re.search(r"stopped after (\d+) requests: (\d+) generations .* (\d+) stopped by a client disconnect", srv.log())
    assert m and int(m.group(1)) >= 200, srv.log()[-500:]
elif GROUP == "asan":
    srv = Server("--max-body", "1000000", "--cors-origin", "*", binary=os.environ["DF_ASAN"])
    try:
        soak(srv, 25)
        check_validation(srv)
        check_body_limit(srv)
        check_messages_api(srv)
        check_tools(srv)  # constrained decoding: tool_choice none and required
        schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}, "b": {"type": "boolean"}},
                  "required": ["a", "b"], "additionalProperties": False}
        for stream in (False, True):
            st, _, j, raw = srv.request("POST", "/v1/chat/completions", {
                "model": MODEL_ID, "max_tokens": 150, "stream": stream, "temperature": 0.8, "seed": 5,
                "messages": [{"role": "user", "content": "json"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}})
            assert st == 200, raw[:500]
            if not stream:
                v = json.loads(j["choices"][0]["message"]["content"])
                assert set(v) == {"a", "b"} and isinstance(v["b"], bool), v
        for sampled in ({"temperature": 0.9, "top_p": 0.8, "top_k": 7, "min_p": 0.02, "seed": 3, "logprobs": True,
                         "top_logprobs": 2, "presence_penalty": 0.5, "logit_bias": {"5": 3}}, {"logprobs": True}):
            st, _, j, _ = srv.chat(max_tokens=6, **sampled)
            lp, msg = j["choices"][0]["logprobs"], j["choices"][0]["message"]
            # the entries cover the text the client reads, byte for byte (not the chat format's markers)
            assert bytes(b for e in lp["content"] for b in e["bytes"]).decode("utf-8", "replace") == msg["content"], j
            assert len(lp["content"]) + len(lp.get("reasoning_content", [])) <= j["usage"]["completion_tokens"], j
            st, _, _, raw = srv.request("POST", "/v1/chat/completions", {"model": MODEL_ID, "stream": True, "max_tokens": 6,
                                                                         "messages": [{"role": "user", "content": "x"}], **sampled})
            assert st == 200 and raw.endswith(b"data: [DONE]\n\n")
    finally:
        code = srv.stop()
    assert code == 0 and "Sanitizer" not in srv.log(), srv.log()[-3000:]
print("PASS", GROUP)
