#!/usr/bin/env bash
# The CUDA device on a machine with an NVIDIA GPU, in its two passes (K3_DEV_PASS):
#   products: only the matrix products on the GPU: logits bit-identical to the CPU kernels for every
#             weight format (BF16 spine, int8 spine, MXFP4 experts) and store layout (mapped;
#             streamed experts; streamed spine layers);
#   layers:   every forward of one sequence with every layer on the GPU (decode steps, prefill
#             chunks, speculation's verify passes): logits within the fp64 reference's tolerance
#             and the reference's greedy tokens (tests/reference/compare.py, every position fed one
#             at a time, and in chunks of several sizes), logits of different chunkings within that
#             tolerance of each other, and the CPU's greedy tokens for every weight format and
#             store layout, a refilled expert cache, a streamed spine, speculation (with the decode
#             state staying on the GPU through its verify passes), the expanded MLA cache (which
#             falls back to the products) and a long context; a streamed spine that the GPU holds
#             whole (no pass reads any of it); the server's batches of several sequences (the
#             CPU server's completions); decode steps replayed as CUDA graphs bit-identical to the
#             same launches made one by one (and `--stats-json`'s layer_pass agreeing with `--stats`);
#   cache:    the layer pass's expert cache in GPU memory small enough to churn (misses copied into
#             it, computed by the CPU, split as measured; over a streaming store whose small cache is
#             refilled all the time, so that experts come back under new keys and are copied again):
#             the CPU's greedy tokens, and the cache evicting and re-copying; the logits
#             bit-identical whichever way the misses run (copied, on the CPU, split as measured);
# then prefill and decode speed side by side with the CPU on a model with K3's real layer shapes, and
# the expert cache on it with real routing replayed (bench/traces/k3-mini-valid.jsonl, K3_REPLAY).
#
#   tests/cuda/device_check.sh DELTAFIN_CUDA_BINARY [scratch_dir] [k3_layers] [check|k3|rows|cache|window|all]
#
# check: the checks (the cache's included); k3: the decode timing; rows: only the layer pass's checks
# of chunks and speculation, then the K3-shaped prefill and speculation rows (the parts a change to
# the pass over several rows needs); cache: the cache's checks and its K3-shaped timing; window: only
# the prefill window's checks (tensor cores on and off, one window and several, long prompts).
#
# Not part of `make test` (CI has no GPU); run it where `nvidia-smi` answers, with a binary from
# `make cuda`. Prints PASS/FAIL lines and a timing table last.
set -uo pipefail
df="$1" dir="${2:-/tmp/deltafin-cuda}" layers="${3:-2}" what="${4:-all}"
py="${PYTHON:-python3}"
ref="$(cd "$(dirname "$0")/../reference" && pwd)/compare.py"
mkdir -p "$dir"
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || bad "nvidia-smi"
toks="5 17 300 42 42 42 7 100 3 9 12 60 77 1 2 3 88 21 4 250 600 11 12 13"

# Logits of the whole token list as one chunk, CPU against the GPU's products: bit-identical.
same() { # label, model, extra env...
    local label=$1 model=$2; shift 2
    env "$@" K3_DEV=cpu "$df" logits --model "$model" --tokens "$toks" --out "$dir/cpu.bin" 2>"$dir/cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/cpu.err")"; return; }
    env "$@" K3_DEV=cuda K3_DEV_PASS=products "$df" logits --model "$model" --tokens "$toks" --out "$dir/gpu.bin" \
        2>"$dir/gpu.err" || { bad "$label: cuda run: $(tail -1 "$dir/gpu.err")"; return; }
    cmp -s "$dir/cpu.bin" "$dir/gpu.bin" && pass "products, $label: logits bit-identical" || bad "products, $label: logits differ"
}

# Every position fed alone, CPU against the GPU's products: the decode kernels (wide loads) are
# bit-identical too.
same1() { # label, model, extra env...
    local label=$1 model=$2; shift 2
    env "$@" K3_DEV=cpu "$df" logits --model "$model" --tokens "$toks" --chunk 1 --out "$dir/cpu.bin" 2>/dev/null &&
        env "$@" K3_DEV=cuda K3_DEV_PASS=products "$df" logits --model "$model" --tokens "$toks" --chunk 1 \
            --out "$dir/gpu.bin" 2>"$dir/gpu.err" || { bad "products T=1, $label: $(tail -1 "$dir/gpu.err")"; return; }
    cmp -s "$dir/cpu.bin" "$dir/gpu.bin" && pass "products T=1, $label: logits bit-identical" ||
        bad "products T=1, $label: logits differ"
}

# The layer pass against the fp64 reference, the tokens fed in chunks of C positions (1: every step
# a decode step on the GPU; more: prefill chunks of C rows), and its greedy tokens (with speculation's
# verify passes); the largest difference from the CPU's logits too.
reference() { # label, model, tokens, greedy, chunk
    local label=$1 model=$2 t=$3 n=$4 c=${5:-1}
    if K3_DEV=cuda "$py" "$ref" --df "$df" --model "$model" --tokens "$t" --chunk "$c" --greedy "$n" --tmp "$dir/ref" \
        >"$dir/ref.log" 2>&1; then
        pass "layers, $label, chunks of $c: within the fp64 reference's tolerance, its $n greedy tokens"
    else
        bad "layers, $label, chunks of $c: against the reference: $(grep -E 'FAIL|differ|compare:' "$dir/ref.log" | head -3 | tr '\n' ' ')"
    fi
    K3_DEV=cpu "$df" logits --model "$model" --tokens "$t" --chunk "$c" --out "$dir/cpu1.bin" 2>/dev/null &&
        K3_DEV=cuda "$df" logits --model "$model" --tokens "$t" --chunk "$c" --out "$dir/gpu1.bin" 2>/dev/null &&
        "$py" - "$dir/cpu1.bin" "$dir/gpu1.bin" "$label, chunks of $c" <<'EOF'
import sys, numpy as np
a, b = np.fromfile(sys.argv[1], "<f4"), np.fromfile(sys.argv[2], "<f4")
print(f"info layers, {sys.argv[3]}: max |gpu - cpu| = {np.max(np.abs(a - b)):.3e} over logits up to {np.max(np.abs(a)):.3e}"
      f" ({np.count_nonzero(a != b)} of {a.size} differ)")
EOF
}

# Two logits files of the same positions within the fp64 reference's tolerance of each other (1e-4
# of the position's largest logit) and with the same argmax at every position; prints the numbers.
# NEAR_TIES (default 0): how many positions may differ beyond the tolerance. Two GPU paths that
# round differently can route a token whose router choice is nearly tied to different experts:
# on the big synth model's 3000-position prompt below, position 2181's layer-2 router margin is
# 5.3e-8 (the fp64 reference's), and the CUDA cores chose the other expert there (0.19 of the
# largest logit; the tensor cores and the CPU agree to 1.5e-5 at every position). A systematic
# error moves every position, not one in a thousand.
logits_close() { # a.bin, b.bin, tokens, label
    NEAR_TIES=${NEAR_TIES:-0} "$py" - "$@" <<'EOF'
import os, sys, numpy as np
n, ties = len(sys.argv[3].split()), int(os.environ["NEAR_TIES"])
a, b = np.fromfile(sys.argv[1], "<f4").reshape(n, -1), np.fromfile(sys.argv[2], "<f4").reshape(n, -1)
err = np.max(np.abs(a - b), axis=1) / np.maximum(1, np.max(np.abs(a), axis=1))
far = np.nonzero((err > 1e-4) | (a.argmax(1) != b.argmax(1)))[0]
close = np.delete(err, far)
print(f"info layers, {sys.argv[4]}: largest difference {err.max():.3e} of the position's largest logit"
      f" ({np.count_nonzero(a != b)} of {a.size} differ), argmax equal at {np.sum(a.argmax(1) == b.argmax(1))} of {n}"
      + (f"; beyond 1e-4 at positions {far[:10].tolist()} (allowed: {ties} near-tied routings),"
         f" elsewhere at most {close.max() if close.size else 0:.3e}" if len(far) else ""))
sys.exit(0 if len(far) <= ties else 1)
EOF
}

# The layer pass's logits of the token list in chunks of 1 and of each size given: within the fp64
# reference's tolerance of each other (1e-4 of the largest logit of the position), and the same
# greedy tokens from `run --chunk` for every size.
chunkings() { # label, model, tokens, greedy, chunk sizes...
    local label=$1 model=$2 t=$3 n=$4 c; shift 4
    K3_DEV=cuda "$df" logits --model "$model" --tokens "$t" --chunk 1 --out "$dir/c1.bin" 2>"$dir/gpu.err" &&
        K3_DEV=cuda "$df" run --model "$model" --tokens "$t" --max-new "$n" --chunk 1 >"$dir/run.c1" 2>>"$dir/gpu.err" ||
        { bad "layers, $label, chunks of 1: $(tail -1 "$dir/gpu.err")"; return; }
    for c in "$@"; do
        K3_DEV=cuda "$df" logits --model "$model" --tokens "$t" --chunk "$c" --out "$dir/cN.bin" 2>"$dir/gpu.err" &&
            K3_DEV=cuda "$df" run --model "$model" --tokens "$t" --max-new "$n" --chunk "$c" >"$dir/run.cN" 2>>"$dir/gpu.err" ||
            { bad "layers, $label, chunks of $c: $(tail -1 "$dir/gpu.err")"; continue; }
        if logits_close "$dir/c1.bin" "$dir/cN.bin" "$t" "$label, chunks of 1 and $c"; then pass "layers, $label: logits of chunks of 1 and $c within 1e-4 of each other"
        else bad "layers, $label: logits of chunks of 1 and $c differ beyond 1e-4"; fi
        cmp -s "$dir/run.c1" "$dir/run.cN" && pass "layers, $label: the same $n greedy tokens in chunks of 1 and $c" ||
            bad "layers, $label: greedy tokens differ between chunks of 1 and $c"
    done
}

# One long prompt prefilled on the GPU two ways (environment A, environment B: tensor cores on and
# off, one window and several): logits within the reference's tolerance of each other, and the same
# greedy tokens after it.
two_ways() { # label, model, prompt, count, "ENV A", "ENV B"
    local label=$1 model=$2 p=$3 n=$4 a=$5 b=$6 ctx w envs
    ctx=$(( $(wc -w <<<"$p") + n + 8 ))
    for w in a b; do
        envs=$a; [ $w = b ] && envs=$b
        # shellcheck disable=SC2086
        env $envs K3_DEV=cuda K3_CONTEXT=$ctx "$df" logits --model "$model" --tokens "$p" --out "$dir/two.$w.bin" \
            2>"$dir/two.err" && env $envs K3_DEV=cuda K3_CONTEXT=$ctx "$df" run --model "$model" --tokens "$p" \
            --max-new "$n" >"$dir/two.$w.run" 2>>"$dir/two.err" || { bad "layers, $label ($envs): $(tail -1 "$dir/two.err")"; return; }
    done
    logits_close "$dir/two.a.bin" "$dir/two.b.bin" "$p" "$label" && pass "layers, $label: logits within 1e-4" ||
        bad "layers, $label: logits differ beyond 1e-4"
    cmp -s "$dir/two.a.run" "$dir/two.b.run" && pass "layers, $label: the same $n greedy tokens" ||
        bad "layers, $label: greedy tokens differ"
}

# Speculation on (the default) with the layer pass, on the trained model (whose text repeats, so
# drafts are verified and kept in full, in part or not at all, by prompt): the CPU's greedy tokens,
# drafts verified, and the decode state copied between host and GPU once (its first upload): every
# verify pass and its commit ran on the GPU.
spec_on_gpu() { # label, prompt text, count, extra env...
    local label=$1 p=$2 n=$3; shift 3
    [ -f "$mini/config.json" ] || { echo "skip $label: no trained model at $mini (MINI)"; return; }
    env "$@" K3_DEV=cpu "$df" run --model "$mini" --prompt "$p" --max-new "$n" >"$dir/run.cpu" 2>"$dir/run.cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/run.cpu.err")"; return; }
    env "$@" K3_DEV=cuda "$df" run --model "$mini" --prompt "$p" --max-new "$n" --stats >"$dir/run.gpu" 2>"$dir/run.gpu.err" ||
        { bad "$label: cuda run: $(tail -1 "$dir/run.gpu.err")"; return; }
    cmp -s "$dir/run.cpu" "$dir/run.gpu" && pass "layers, $label: same $n tokens as the CPU with speculation" ||
        bad "layers, $label: tokens differ with speculation"
    local verified syncs
    verified=$(sed -n 's/^stats: speculation on: .*; \([0-9]*\) drafts verified.*/\1/p' "$dir/run.gpu.err")
    syncs=$(sed -n 's/^stats: layer pass: .*copied between host and GPU \([0-9]*\) times.*/\1/p' "$dir/run.gpu.err")
    echo "info layers, $label: $(grep -E '^stats: (speculation|layer pass: [0-9])' "$dir/run.gpu.err" | tr '\n' ' ')"
    [ "${verified:-0}" -gt 0 ] && [ "${syncs:-9}" -le 1 ] &&
        pass "layers, $label: $verified verify passes, the decode state stayed on the GPU" ||
        bad "layers, $label: verify passes ${verified:-none}, state copies ${syncs:-unknown} (want > 0 and <= 1)"
}

# Decode steps replayed as CUDA graphs (K3_DEV_GRAPHS=1, the default) against the same launches
# made one by one: the same kernels on the same arguments, so bit-identical logits of every position
# fed alone, and the same greedy tokens over a long decode (speculation's verify passes, which are
# not recorded, between the steps), with graphs run only when asked for.
graphs_same() { # label, model, tokens, greedy, extra env...
    local label=$1 model=$2 t=$3 n=$4 g runs; shift 4
    for g in 0 1; do
        env "$@" K3_DEV=cuda K3_DEV_GRAPHS=$g "$df" logits --model "$model" --tokens "$t" --chunk 1 --out "$dir/graphs$g.bin" \
            2>"$dir/gpu.err" &&
            env "$@" K3_DEV=cuda K3_DEV_GRAPHS=$g "$df" run --model "$model" --tokens "$t" --max-new "$n" --stats \
                --stats-json "$dir/graphs$g.json" >"$dir/graphs$g.run" 2>"$dir/graphs$g.err" ||
            { bad "layers, $label, K3_DEV_GRAPHS=$g: $(tail -1 "$dir/gpu.err" "$dir/graphs$g.err" 2>/dev/null | tail -1)"; return; }
        runs[$g]=$(sed -n 's/^stats: layer pass: .* \([0-9]*\) stretches between waits run as CUDA graphs.*/\1/p' "$dir/graphs$g.err")
        # --stats-json's layer_pass says the same, and every forward ran on the GPU
        "$py" - "$dir/graphs$g.json" "${runs[$g]:-x}" <<'PY' && pass "layers, $label, K3_DEV_GRAPHS=$g: --stats-json layer_pass agrees with --stats" ||
import json, sys
j = json.load(open(sys.argv[1]))
lp = j["layer_pass"]
sys.exit(not (lp and str(lp["graph_stretches"]) == sys.argv[2] and lp["device_forwards"] == j["phases"]["forwards"]))
PY
            bad "layers, $label, K3_DEV_GRAPHS=$g: --stats-json layer_pass disagrees with --stats or with phases.forwards"
    done
    cmp -s "$dir/graphs0.bin" "$dir/graphs1.bin" &&
        pass "layers, $label: logits of decode steps bit-identical with CUDA graphs and without" ||
        bad "layers, $label: logits of decode steps differ between CUDA graphs and launches one by one"
    cmp -s "$dir/graphs0.run" "$dir/graphs1.run" && pass "layers, $label: the same $n greedy tokens with CUDA graphs" ||
        bad "layers, $label: greedy tokens differ with CUDA graphs"
    [ "${runs[0]:-x}" = 0 ] && [ "${runs[1]:-0}" -gt 0 ] &&
        pass "layers, $label: ${runs[1]} stretches run as graphs (0 with K3_DEV_GRAPHS=0)" ||
        bad "layers, $label: stretches run as graphs: ${runs[0]:-unknown} without, ${runs[1]:-unknown} with"
}

# The experts the GPU's cache misses, copied, computed by the CPU threads, and split between the
# two as measured (which follows timing): an expert gives the same bits on either side (the
# products, and SiTU: kernels/exactmath.h), so the logits of every position fed alone are
# bit-identical all three ways, and from run to run.
host_ways_same() { # label, model, extra env...
    local label=$1 model=$2 way; shift 2
    for way in copy cpu auto auto-again; do
        env "$@" K3_DEV=cuda K3_DEV_HOST_EXPERTS=${way%-again} "$df" logits --model "$model" --tokens "$toks" --chunk 1 \
            --out "$dir/way.$way.bin" 2>"$dir/gpu.err" || { bad "layers, $label, misses $way: $(tail -1 "$dir/gpu.err")"; return; }
    done
    for way in cpu auto auto-again; do
        cmp -s "$dir/way.copy.bin" "$dir/way.$way.bin" &&
            pass "layers, $label: logits with misses $way bit-identical to misses copied" ||
            bad "layers, $label: logits with misses $way differ from misses copied"
    done
}

# Greedy tokens of `run` (prefill by the products, decode steps by the layer pass) = the CPU's.
tokens_same() { # label, model, prompt, count, extra env...
    local label=$1 model=$2 p=$3 n=$4; shift 4
    env "$@" K3_DEV=cpu "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/run.cpu" 2>"$dir/run.cpu.err" ||
        { bad "$label: cpu run: $(tail -1 "$dir/run.cpu.err")"; return; }
    env "$@" K3_DEV=cuda "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/run.gpu" 2>"$dir/run.gpu.err" ||
        { bad "$label: cuda run: $(tail -1 "$dir/run.gpu.err")"; return; }
    cmp -s "$dir/run.cpu" "$dir/run.gpu" && pass "layers, $label: same $n tokens as the CPU" || bad "layers, $label: tokens differ"
}

# A streamed spine the GPU has room for: the plan pins no layer in RAM, the GPU holds every layer
# (the start-up line says so) and no pass (prefill, decode, verify) reads spine bytes (K3_PROFILE), with
# the CPU's tokens.
spine_held() { # label, model, prompt, count, extra env...
    local label=$1 model=$2 p=$3 n=$4; shift 4
    env "$@" K3_DEV=cpu "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/held.cpu" 2>/dev/null
    env "$@" K3_DEV=cuda K3_PROFILE=1 "$df" run --model "$model" --tokens "$p" --max-new "$n" >"$dir/held.gpu" \
        2>"$dir/held.err" || { bad "$label: cuda run: $(tail -1 "$dir/held.err")"; return; }
    local layers held reads
    layers=$(sed -n 's/.*(\([0-9]*\) layers, .*/\1/p' "$dir/held.err" | head -1)
    held=$(grep -c "spine $layers/$layers layers held" "$dir/held.err")
    reads=$(grep '^profile: pos' "$dir/held.err" | grep -vc 'read spine 0.0 MB')
    if [ "$held" = 1 ] && [ "$reads" = 0 ] && grep -q "0/$layers layers pinned" "$dir/held.err" && cmp -s "$dir/held.cpu" "$dir/held.gpu"; then
        pass "layers, $label: the GPU holds all $layers layers, no pass reads spine bytes, the CPU's $n tokens"
    else
        bad "layers, $label: held $held, passes reading the spine $reads, tokens $(cmp -s "$dir/held.cpu" "$dir/held.gpu" && echo same || echo differ): $(grep -m1 'streaming:' "$dir/held.err")"
    fi
}

# Two rounds of `run --stats` (33 new tokens) on the K3-shaped model for each row "label:settings" (a
# label starting "old " runs OLD_DF), the round-2 stats lines matching `more` printed; every row's
# tokens must be the first row's.
k3_rows() { # tag, prompt, more, rows...
    local tag=$1 p=$2 more=$3 round row label settings bin out t0; shift 3
    for round in 1 2; do
        for row in "$@"; do
            label=${row%%:*} settings=${row#*:} bin=$df
            [ "${label#old }" != "$label" ] && bin=$OLD_DF
            t0=$(date +%s.%N)
            out=$(env $settings "$bin" run --model "$dir/k3" --tokens "$p" --max-new 33 --stats 2>&1 >"$dir/$tag.tok.${label//[ ,]/_}") ||
                { bad "k3 shapes, $tag: $label: $(tail -1 <<<"$out")"; rm -f "$dir/$tag.tok.${label//[ ,]/_}"; }
            printf '%s round %d %-26s %s (process %s s)\n' "$tag" "$round" "$label" "$(grep -E '^stats: prompt' <<<"$out")" \
                "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
            [ $round = 2 ] && grep -E "^stats: ($more)" <<<"$out" | sed 's/^/        /'
        done
    done
    local first=${1%%:*}
    for row in "${@:2}"; do
        label=${row%%:*}
        [ -s "$dir/$tag.tok.${first//[ ,]/_}" ] && cmp -s "$dir/$tag.tok.${first//[ ,]/_}" "$dir/$tag.tok.${label//[ ,]/_}" &&
            pass "k3 shapes, $tag: $label tokens = $first" || bad "k3 shapes, $tag: $label tokens differ (or a run failed)"
    done
}

# The expert cache's counts of a run (--stats): "hits evictions re-copies" (0 0 0 without the line).
cache_counts() { # model, extra env...
    local model=$1; shift
    env "$@" K3_DEV=cuda "$df" run --model "$model" --tokens "$toks" --max-new 48 --stats 2>&1 >/dev/null |
        sed -n 's/^stats: GPU expert cache ([0-9]* slots): \([0-9]*\) hits.*(\([0-9]*\) evictions, \([0-9]*\) re-copies.*/\1 \2 \3/p' |
        grep . || echo "0 0 0"
}

# One K3-shaped decode: its stats lines, indented, after a summary line.
k3_run() { # round, label, new tokens, settings...
    local round=$1 label=$2 new=$3; shift 3
    local t0 out
    t0=$(date +%s.%N)
    out=$(env "$@" K3_SPEC=0 "$df" run --model "$dir/k3" --tokens 1 --max-new "$new" --stats 2>&1 >"$dir/k3.tok.${label// /_}")
    printf 'round %d %-24s %s (process %s s)\n' "$round" "$label" "$(grep -E '^stats: prompt' <<<"$out")" \
        "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
    { grep -o 'device cuda ([^|]*' <<<"$out" | head -1; grep -E '^stats: (phases|layer pass|GPU expert cache)' <<<"$out"; } |
        sed 's/^/        /'
}

k3_model() {
    echo "== synth --preset k3 --layers $layers"
    local t0
    t0=$(date +%s)
    [ -f "$dir/k3/config.json" ] || "$df" synth --preset k3 --layers "$layers" --seed 2 --out "$dir/k3" --quiet >/dev/null ||
        bad "synth k3"
    echo "synth took $(( $(date +%s) - t0 )) s, $(du -sh "$dir/k3" | cut -f1)"
}

# The server decoding several requests together (--parallel 4: batched passes of several sequences
# in the layer pass): the same greedy completions as the CPU server's, every request answered.
batches_same() { # label, model
    local label=$1 model=$2 dev pid port
    for dev in cpu cuda; do
        port=$((20000 + RANDOM % 20000))
        K3_DEV=$dev "$df" serve --model "$model" --port "$port" --parallel 4 >"$dir/serve.$dev.log" 2>&1 &
        pid=$!
        "$py" - "$port" "$dir/batch.$dev" <<'EOF'
import json, sys, threading, time, urllib.request
port, out = sys.argv[1], sys.argv[2]
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
        break
    except Exception:
        time.sleep(0.2)
model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10))["data"][0]["id"]
prompts = ["The cat sat on", "Once upon a time", "red green blue red", "a b c d e f"]
texts = [None] * len(prompts)
def ask(i):
    body = json.dumps({"model": model, "prompt": prompts[i], "max_tokens": 24, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    try:
        texts[i] = json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["text"]
    except Exception as e:
        print(f"request {i}: {e}", file=sys.stderr)
threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
for t in threads: t.start()
for t in threads: t.join()
with open(out, "w") as f: json.dump(texts, f)
EOF
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    done
    if [ -s "$dir/batch.cpu" ] && cmp -s "$dir/batch.cpu" "$dir/batch.cuda" && [ "$(grep -c null "$dir/batch.cuda")" = 0 ]; then
        pass "layers, $label: 4 requests decoded together, the CPU server's completions"
    else
        bad "layers, $label: batched completions differ or failed: $(tail -1 "$dir/serve.cuda.log")"
    fi
}

mini="${MINI:-$(cd "$(dirname "$0")/../.." && pwd)/models/k3-mini}"
full="The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat"
part="Once upon a time there was a little girl. Once upon a time there was a little boy. Once upon a time"
none="red green blue red green blue red green"
if [ "$what" != k3 ] && [ "$what" != cache ] && [ "$what" != window ]; then
    "$df" synth --preset tiny --seed 3 --out "$dir/tiny" --quiet >/dev/null
    "$df" synth --preset small --seed 4 --out "$dir/small" --quiet >/dev/null
    "$df" synth --preset big --size-gb 0.8 --seed 1 --out "$dir/big" --quiet >/dev/null
    reference "tiny" "$dir/tiny" "$toks" 16 5
    reference "small" "$dir/small" "$toks" 16 24
    reference "big (896 MXFP4 experts)" "$dir/big" "5 17 300 42 7 100 3 9" 8 3
    chunkings "small" "$dir/small" "$toks" 24 4 9 24
    chunkings "big" "$dir/big" "$toks" 16 7 24
    graphs_same "small" "$dir/small" "$toks" 200
    # (misses copied: the measured split between copies and the CPU threads follows timing, and an
    # expert's SiTU on the CPU and on the GPU may differ in the last bit)
    graphs_same "big, a small GPU expert cache, misses copied" "$dir/big" "$toks" 64 K3_DEV_EXPERT_GB=0.01 \
        K3_DEV_HOST_EXPERTS=copy
    [ -f "$mini/config.json" ] && graphs_same "k3-mini" "$mini" "$toks" 200
    spec_on_gpu "k3-mini, drafts kept in full" "$full" 64
    spec_on_gpu "k3-mini, drafts kept in part" "$part" 64
    spec_on_gpu "k3-mini, drafts rejected" "$none" 64
    spec_on_gpu "k3-mini, experts in host memory, as measured" "$part" 64 K3_DEV_EXPERT_GB=0
    spec_on_gpu "k3-mini, streamed spine and a small refilled cache" "$part" 64 K3_STORE=stream K3_RAM_GB=0.23
    batches_same "small, the server's batches" "$dir/small"
    [ -f "$mini/config.json" ] && batches_same "k3-mini, the server's batches" "$mini"
fi

# The prefill window's products on the tensor cores (products of 48 rows or more: BF16 parts of X,
# weights expanded exactly to BF16, fp32 sums): against the fp64 reference in one chunk, against the
# CUDA cores, and a window against several on prompts long enough that experts get 48 rows.
if [ "$what" = check ] || [ "$what" = all ] || [ "$what" = window ]; then
    [ -f "$dir/small/config.json" ] || "$df" synth --preset small --seed 4 --out "$dir/small" --quiet >/dev/null
    [ -f "$dir/big/config.json" ] || "$df" synth --preset big --size-gb 0.8 --seed 1 --out "$dir/big" --quiet >/dev/null
    prompt_of() { seq 1 "$1" | awk -v v="$2" '{printf "%d ", ($1 * 7919) % (v - 300) + 3}'; }
    p1k=$(prompt_of 1000 1024)
    reference "small, a 1000-position prompt" "$dir/small" "$p1k" 8 1000
    [ -f "$mini/config.json" ] && reference "k3-mini, a 600-position prompt" "$mini" "$(prompt_of 600 8448)" 8 600
    two_ways "small, 1000 positions, tensor cores on and off" "$dir/small" "$p1k" 16 "" K3_DEV_TENSOR_CORES=0
    p3k=$(prompt_of 3000 4096)
    NEAR_TIES=2 two_ways "big, 3000 positions, tensor cores on and off" "$dir/big" "$p3k" 16 "" K3_DEV_TENSOR_CORES=0
    two_ways "big, 3000 positions, one window and windows of 512" "$dir/big" "$p3k" 16 "" K3_PREFILL_WINDOW=512
    NEAR_TIES=2 two_ways "big, 3000 positions, experts in host memory, tensor cores on and off" "$dir/big" "$p3k" 8 \
        K3_DEV_EXPERT_GB=0 "K3_DEV_EXPERT_GB=0 K3_DEV_TENSOR_CORES=0"
    [ -f "$mini/config.json" ] && two_ways "k3-mini, 2000 positions, tensor cores on and off" "$mini" \
        "$(prompt_of 2000 8448)" 16 "" K3_DEV_TENSOR_CORES=0
fi

trace="$(cd "$(dirname "$0")/../../bench/traces" && pwd)/k3-mini-valid.jsonl"
if [ "$what" = check ] || [ "$what" = all ] || [ "$what" = cache ]; then
    [ -f "$dir/big/config.json" ] || "$df" synth --preset big --size-gb 0.8 --seed 1 --out "$dir/big" --quiet >/dev/null
    # 0.01 GB: 27 slots of 0.37 MB for the 2 x 16 experts a token routes (896 per layer)
    small="K3_DEV_EXPERT_GB=0.01"
    tokens_same "big, small GPU expert cache, misses copied into it" "$dir/big" "$toks" 48 $small K3_DEV_HOST_EXPERTS=copy
    tokens_same "big, small GPU expert cache, misses on the CPU" "$dir/big" "$toks" 48 $small K3_DEV_HOST_EXPERTS=cpu
    tokens_same "big, small GPU expert cache, misses split as measured" "$dir/big" "$toks" 48 $small
    host_ways_same "big, small GPU expert cache" "$dir/big" $small
    host_ways_same "big, no GPU expert cache" "$dir/big" K3_DEV_EXPERT_GB=0
    # a streaming store near its fewest slots (all layers pinned; the CPU run needs its layers'
    # scratch beside them) under a 136-slot GPU cache, with
    # real routing replayed (experts come back after the host cache dropped them: new keys)
    refilled="K3_STORE=stream K3_RAM_GB=0.28 K3_DEV_EXPERT_GB=0.05 K3_REPLAY=$trace"
    tokens_same "big, GPU expert cache over a refilled streaming cache, copied" "$dir/big" "$toks" 48 $refilled \
        K3_DEV_HOST_EXPERTS=copy
    tokens_same "big, GPU expert cache over a refilled streaming cache, split" "$dir/big" "$toks" 48 $refilled
    tokens_same "big, GPU expert cache over a streaming cache, streamed spine" "$dir/big" "$toks" 32 $small \
        K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
    read -r hits ev rc <<<"$(cache_counts "$dir/big" $small K3_DEV_HOST_EXPERTS=copy K3_REPLAY="$trace")"
    [ "$hits" -gt 0 ] && [ "$ev" -gt 0 ] && pass "cache: a small GPU expert cache hits ($hits) and evicts ($ev)" ||
        bad "cache: a small GPU expert cache: $hits hits, $ev evictions"
    read -r hits ev rc <<<"$(cache_counts "$dir/big" $refilled K3_DEV_HOST_EXPERTS=copy)"
    [ "$rc" -gt 0 ] && pass "cache: experts whose host slot was refilled are copied again ($rc; $hits hits)" ||
        bad "cache: over a refilled streaming cache: $hits hits, $ev evictions, $rc re-copies"
fi

if [ "$what" = check ] || [ "$what" = all ]; then
    rm -rf "$dir/small8" && cp -r "$dir/small" "$dir/small8" && "$df" convert-spine --model "$dir/small8" --no-check >/dev/null 2>&1

    same "tiny bf16" "$dir/tiny"
    same "small bf16" "$dir/small"
    same "small int8 spine" "$dir/small8"
    same "small bf16, expanded MLA cache" "$dir/small" K3_MLA_CACHE=expanded
    same "big (896 MXFP4 experts, top-16)" "$dir/big"
    same "big, streamed experts, pinned spine" "$dir/big" K3_STORE=stream K3_RAM_GB=2
    # a 132-slot cache: slots are refilled all the time, and the GPU's copies of them must follow
    same "big, small streamed cache (slots refilled)" "$dir/big" K3_STORE=stream K3_RAM_GB=0.3
    same "big, streamed spine (1 layer pinned)" "$dir/big" K3_STORE=stream K3_RAM_GB=2 K3_PIN_LAYERS=1
    same "small int8, streamed spine" "$dir/small8" K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
    same1 "small bf16" "$dir/small"
    same1 "big (MXFP4 experts)" "$dir/big"
    K3_DEV=cuda "$df" run --model "$dir/small" --tokens "1 2 3" --max-new 4 >/dev/null 2>"$dir/gpu.err"
    grep -q "device cuda (" "$dir/gpu.err" && pass "start-up line names the GPU" || bad "start-up line: $(head -1 "$dir/gpu.err")"

    reference "tiny" "$dir/tiny" "$toks" 16
    reference "small" "$dir/small" "$toks" 16
    reference "big (896 MXFP4 experts)" "$dir/big" "5 17 300 42 7 100 3 9" 8
    long=$(seq 1 400 | awk '{printf "%d ", ($1 * 37) % 1000 + 3}')
    reference "small, 400-position context" "$dir/small" "$long" 8
    reference "small, 400-position context" "$dir/small" "$long" 8 64

    tokens_same "tiny" "$dir/tiny" "$toks" 48
    tokens_same "small" "$dir/small" "$toks" 48
    tokens_same "small, speculation off" "$dir/small" "$toks" 48 K3_SPEC=0
    tokens_same "small int8 spine" "$dir/small8" "$toks" 48
    tokens_same "small, expanded MLA cache (products)" "$dir/small" "$toks" 32 K3_MLA_CACHE=expanded
    tokens_same "big, mapped" "$dir/big" "$toks" 48
    tokens_same "big, streamed experts" "$dir/big" "$toks" 48 K3_STORE=stream K3_RAM_GB=2
    tokens_same "big, small streamed cache (slots refilled)" "$dir/big" "$toks" 48 K3_STORE=stream K3_RAM_GB=0.3
    tokens_same "big, experts in host memory, on the CPU" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=cpu
    tokens_same "big, experts in host memory, copied" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=copy
    tokens_same "big, experts in host memory, as measured" "$dir/big" "$toks" 48 K3_DEV_EXPERT_GB=0
    tokens_same "big, streamed spine" "$dir/big" "$toks" 32 K3_STORE=stream K3_RAM_GB=2 K3_PIN_LAYERS=1
    tokens_same "small int8, streamed spine" "$dir/small8" "$toks" 48 K3_STORE=stream K3_RAM_GB=0.3 K3_PIN_LAYERS=1
    spine_held "big, streamed spine held on the GPU" "$dir/big" "$toks" 24 K3_STORE=stream K3_RAM_GB=2
    spine_held "small int8, streamed spine held on the GPU" "$dir/small8" "$toks" 24 K3_STORE=stream K3_RAM_GB=0.3
    tokens_same "small, long context (2000-token prompt)" "$dir/small" \
        "$(seq 1 2000 | awk '{printf "%d ", ($1 * 91) % 1000 + 3}')" 64 K3_SPEC=0
fi

if [ "$what" != check ] && [ "$what" != window ]; then
    # timing: K3's real layer shapes (hidden 7168, 96 heads, 896 experts of 17.55 MB, top-16)
    echo "== synth --preset k3 --layers $layers"
    t0=$(date +%s)
    [ -f "$dir/k3/config.json" ] || "$df" synth --preset k3 --layers "$layers" --seed 2 --out "$dir/k3" --quiet >/dev/null ||
        bad "synth k3"
    echo "synth took $(( $(date +%s) - t0 )) s, $(du -sh "$dir/k3" | cut -f1)"
fi
if [ "$what" = cache ] || [ "$what" = all ]; then
    # the GPU expert cache on K3's shapes (experts of 17.55 MB; a token routes 2 x 16): real routing
    # replayed (the k3-mini model's validation trace mapped onto 896 experts: 128 used per layer, so
    # 256 experts, 4.5 GB, are the working set); 0.67 GB holds 1.2 tokens' worth (38 slots), as
    # 30 GB would for the full model. Every row in (page-locked) host memory beyond the cache.
    k3_model
    replay="K3_DEV=cuda K3_STORE=mapped K3_REPLAY=$trace"
    rows=("no cache, split:$replay K3_DEV_EXPERT_GB=0"
          "no cache, copied:$replay K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=copy"
          "0.67 GB, split:$replay K3_DEV_EXPERT_GB=0.67"
          "0.67 GB, copied:$replay K3_DEV_EXPERT_GB=0.67 K3_DEV_HOST_EXPERTS=copy"
          "0.67 GB, cpu:$replay K3_DEV_EXPERT_GB=0.67 K3_DEV_HOST_EXPERTS=cpu"
          "2 GB, split:$replay K3_DEV_EXPERT_GB=2"
          "4.5 GB, split:$replay K3_DEV_EXPERT_GB=4.5")
    for row in "${rows[@]}"; do k3_run 1 "${row%%:*}" 64 ${row#*:}; done
    for row in "${rows[@]:1}"; do
        label=${row%%:*}
        cmp -s "$dir/k3.tok.no_cache,_split" "$dir/k3.tok.${label// /_}" && pass "k3 replay: $label tokens = no cache" ||
            bad "k3 replay: $label tokens differ"
    done
    # the router's own (synthetic, near uniform) routing: every expert resident (the cache filled at
    # start-up), none, and a 2 GB cache
    k3_run 1 "all resident" 33 K3_DEV=cuda K3_STORE=mapped
    k3_run 1 "2 GB, router" 33 K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=2
    k3_run 1 "no cache, router" 33 K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0
    for label in "2 GB, router" "no cache, router"; do
        cmp -s "$dir/k3.tok.all_resident" "$dir/k3.tok.${label// /_}" && pass "k3 shapes: $label tokens = all resident" ||
            bad "k3 shapes: $label tokens differ"
    done
fi

if [ "$what" = k3 ] || [ "$what" = all ]; then
    # one prompt token: every position is a decode step (on the GPU: all in the layer pass, so its
    # phases are the GPU's timeline)
    prompt="1"
    # mapped: weights resident on the GPU (the layer pass copies the spine and every expert that
    # fits at start-up); host: the experts stay in (page-locked) host memory and run copied, on the
    # CPU threads, or as measured; stream: the expert cache is refilled from disk
    rows=("cpu mapped:K3_DEV=cpu K3_STORE=mapped"
          "cuda layers mapped:K3_DEV=cuda K3_STORE=mapped"
          "cuda layers no graphs:K3_DEV=cuda K3_STORE=mapped K3_DEV_GRAPHS=0"
          "cuda products mapped:K3_DEV=cuda K3_DEV_PASS=products K3_STORE=mapped"
          "cuda host copy:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=copy"
          "cuda host cpu:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0 K3_DEV_HOST_EXPERTS=cpu"
          "cuda host auto:K3_DEV=cuda K3_STORE=mapped K3_DEV_EXPERT_GB=0"
          "cpu stream:K3_DEV=cpu K3_STORE=stream K3_RAM_GB=24" "cuda layers stream:K3_DEV=cuda K3_STORE=stream K3_RAM_GB=24")
    [ -n "${OLD_DF:-}" ] && rows+=("old cuda layers mapped:K3_DEV=cuda K3_STORE=mapped")
    K3_SPEC=0 k3_rows decode "$prompt" "phases|layer pass" "${rows[@]}"
fi
if [ "$what" != check ] && [ "$what" != cache ] && [ "$what" != window ]; then
    # prefill and speculation: a 16-token prompt that repeats (the layer pass runs it as one chunk of
    # 16 rows, then decode steps and verify passes when drafts come), 33 new tokens, speculation on;
    # OLD_DF (another build, e.g. the previous commit's) adds its row beside
    prompt="11 12 13 14 15 16 17 18 11 12 13 14 15 16 17 18"
    rows=("cpu:K3_DEV=cpu" "cuda layers:K3_DEV=cuda" "cuda products:K3_DEV=cuda K3_DEV_PASS=products")
    [ -n "${OLD_DF:-}" ] && rows+=("old cuda layers:K3_DEV=cuda")
    K3_STORE=mapped k3_rows prefill "$prompt" "phases|layer pass|speculation" "${rows[@]}"
    # verify passes of 2, 5 and 9 rows against a plain pass, each kept to one row (bench/bench_verify.c),
    # in the layer pass (OLD_DF's build beside, when given)
    for b in "this:$(dirname "$df")/bench/bench_verify" ${OLD_DF:+"old:$(dirname "$OLD_DF")/bench/bench_verify"}; do
        label=${b%%:*} bv=${b#*:}
        [ -x "$bv" ] || { echo "skip bench_verify ($label build): no $bv"; continue; }
        echo "== bench_verify, $label build, cuda layers, K3 shapes"
        K3_DEV=cuda K3_STORE=mapped "$bv" "$dir/k3" 6 1 2 5 9 2>&1 || bad "bench_verify ($label build) failed"
    done
fi
[ $fail = 0 ] && echo "ALL PASS" || echo "SOME FAILED"
exit $fail
