#!/usr/bin/env bash
# deltafin bench: interleaved configurations of fresh `run` children, every run's tokens checked.
# Lossless settings (speculation, threads, the streaming store) pass and hold the very ids a plain
# `deltafin run` prints; a lossy one (K3_MOE_TOP_K) is labelled with its token difference counted
# independently; medians, ranges and ratios agree with the per-run values in the JSON; a setting
# that changes the output without changing the numerics (a context limit) fails naming config and
# run; bad names, failing children and Ctrl-C end the command with a clear message.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/bench"
mkdir -p "$t/tmp"
export TMPDIR="$t/tmp" # bench's private directory must be gone afterwards
"$DF" synth --preset tiny --seed 4 --out "$t/tiny" --quiet >/dev/null
"$DF" synth --preset small --seed 2 --out "$t/small" --quiet >/dev/null
p="1 2 3 1 2 3 1 2 3 1 2 3 1 2 3 1" # repetitive prompt (random weights do not continue it, so no drafts)

# 1. lossless configurations, two runs each, with a lossy one and a streamed one
"$DF" bench --model "$t/tiny" --tokens "$p" --max-new 24 --runs 2 --config K3_SPEC=0 --config K3_SPEC=1 \
    --config K3_THREADS=1 --config K3_THREADS=2,K3_STORE=stream,K3_RAM_GB=0.5 --config K3_MOE_TOP_K=1 \
    --json "$t/b.json" >"$t/b.out" 2>"$t/b.err"
"$DF" run --model "$t/tiny" --tokens "$p" --max-new 24 >"$t/exact"
K3_MOE_TOP_K=1 "$DF" run --model "$t/tiny" --tokens "$p" --max-new 24 >"$t/lossy"
expect_grep "K3_MOE_TOP_K=1 .* other numerics (spine bf16, experts top-1 of 2, A_log per-head, MLA cache latent)" "$t/b.out"
expect_eq 3 "$(grep -c "= baseline" "$t/b.out")" "configurations with the baseline's tokens"
# interleaved: round 1 runs every config before round 2 runs any
grep -o "round [0-9]/2 [^:]*" "$t/b.err" | tr '\n' '|' | expect_grep -x \
    "round 1/2 K3_SPEC=0|round 1/2 K3_SPEC=1|round 1/2 K3_THREADS=1|round 1/2 K3_THREADS=2,K3_STORE=stream,K3_RAM_GB=0.5|round 1/2 K3_MOE_TOP_K=1|round 2/2 K3_SPEC=0|round 2/2 K3_SPEC=1|round 2/2 K3_THREADS=1|round 2/2 K3_THREADS=2,K3_STORE=stream,K3_RAM_GB=0.5|round 2/2 K3_MOE_TOP_K=1|"
"$PYTHON" - "$t/b.json" "$t/exact" "$t/lossy" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
exact = [int(x) for x in open(sys.argv[2]).read().split()]
lossy = [int(x) for x in open(sys.argv[3]).read().split()]
assert len(exact) == 24 and len(lossy) == 24, (exact, lossy)
c = {x["name"]: x for x in d["configs"]}
assert list(c) == ["K3_SPEC=0", "K3_SPEC=1", "K3_THREADS=1", "K3_THREADS=2,K3_STORE=stream,K3_RAM_GB=0.5", "K3_MOE_TOP_K=1"]
assert d["baseline"] == "K3_SPEC=0" and d["prompt_tokens"] == 16 and d["runs_per_config"] == 2
base = c["K3_SPEC=0"]["decode_s_per_token"]["median"]
for name, x in c.items():
    assert len(x["runs"]) == 2, name
    want = lossy if name == "K3_MOE_TOP_K=1" else exact
    for r in x["runs"]:
        assert r["tokens"] == want, (name, r["tokens"], want)
    assert x["tokens"] == want
    assert x["lossy"] == (name == "K3_MOE_TOP_K=1"), name
    # the children really ran with the overrides
    # decode feeds one position per plain pass plus every drafted token, and emits one token per
    # pass plus every accepted one: 23 tokens after the prefill's first
    for r in x["runs"]:
        sp, ph = r["speculation"], r["phases"]
        assert ph["decode_positions"] == sp["passes"] + sp["drafted"] and sp["passes"] + sp["accepted"] == 23, (name, r)
    if name == "K3_SPEC=0": assert not x["runs"][0]["speculation"]["on"] and x["runs"][0]["phases"]["decode_positions"] == 23
    if name == "K3_SPEC=1": assert x["runs"][0]["speculation"]["on"]
    if name == "K3_THREADS=1": assert x["runs"][0]["threads"] == 1 and x["runs"][0]["store"] == "mapped"
    # medians and ranges are those of the per-run values
    for key, field in [("decode_s_per_token", "s_per_token"), ("prefill_tokens_per_s", "prefill_tokens_per_s")]:
        vals = [r[field] for r in x["runs"]]
        s = x[key]
        assert abs(s["median"] - statistics.median(vals)) <= 1e-7 * max(vals), (name, key, s, vals)
        assert s["min"] == min(vals) and s["max"] == max(vals), (name, key)
        assert all(v > 0 for v in vals), (name, key, vals)
    assert abs(x["ratio_to_baseline"] - x["decode_s_per_token"]["median"] / base) < 1e-6
streamed = c["K3_THREADS=2,K3_STORE=stream,K3_RAM_GB=0.5"]
assert streamed["runs"][0]["store"] == "stream" and streamed["runs"][0]["threads"] == 2
mb = [(r["read"]["decode_spine_bytes"] + r["read"]["decode_expert_bytes"]) / 1e6 / 23 for r in streamed["runs"]]
assert min(mb) > 0 and abs(streamed["read_mb_per_token"]["median"] / statistics.median(mb) - 1) < 1e-6
assert c["K3_SPEC=0"]["read_mb_per_token"] is None
differ = sum(a != b for a, b in zip(exact, lossy))
first = next(i for i in range(24) if exact[i] != lossy[i])
x = c["K3_MOE_TOP_K=1"]
assert differ > 0 and x["tokens_differing_from_baseline"] == differ and x["first_difference"] == first, (x, differ)
assert c["K3_SPEC=1"]["tokens_differing_from_baseline"] == 0 and c["K3_SPEC=1"]["same_as_baseline"]
print("json ok; lossy differs in", differ, "of 24")
EOF
expect_grep "K3_MOE_TOP_K=1 .* of 24 differ from baseline" "$t/b.out"

# 2. no --config: one default configuration on the small model, with a warm-up round; --prompt
"$DF" bench --model "$t/small" --prompt "hello bench" --max-new 6 --runs 1 --warmup --json "$t/d.json" >"$t/d.out" 2>"$t/d.err"
expect_grep "warm-up 1/1 default" "$t/d.err"
expect_grep "^default  *1 " "$t/d.out"
quietly "$DF" run --model "$t/small" --prompt "hello bench" --max-new 6 --stats-json "$t/run.json"
"$PYTHON" -c "
import json, sys
d = json.load(open('$t/d.json')); r = json.load(open('$t/run.json'))
assert len(d['configs']) == 1 and len(d['configs'][0]['runs']) == 1 and d['warmup'] is True
assert d['configs'][0]['tokens'] == r['tokens'] and len(r['tokens']) == 6, (d['configs'][0]['tokens'], r['tokens'])
"

# 3. a lossless-numerics config whose tokens differ anyway fails, naming config and run
expect_fail "config 'K3_CONTEXT=20' run 1 generated tokens that differ from config 'K3_SPEC=1' run 1" \
    "$DF" bench --model "$t/tiny" --tokens "$p" --max-new 24 --runs 1 --config K3_SPEC=1 --config K3_CONTEXT=20

# 4. names outside K3_*/DELTAFIN_* are refused before anything runs; so are malformed configs
expect_fail "'LD_PRELOAD' is not a K3_\* or DELTAFIN_\* variable name" \
    "$DF" bench --model "$t/tiny" --tokens "1 2" --config K3_SPEC=1 --config LD_PRELOAD=/x.so
expect_no_grep "round" "$EXPECT_OUT"
expect_fail "'K3_SPEC' is not NAME=VALUE" "$DF" bench --model "$t/tiny" --tokens "1 2" --config K3_SPEC
expect_fail -- "--max-new: 1 is not in 2..16777216" "$DF" bench --model "$t/tiny" --tokens "1 2" --max-new 1
# an unknown (maybe misspelt) K3_ name is run, with a warning
"$DF" bench --model "$t/tiny" --tokens "1 2" --runs 1 --config K3_SPCE=0 >/dev/null 2>"$t/n.err"
expect_grep "warning: K3_SPCE is not a setting" "$t/n.err"

# 5. a child that fails fails the bench with the child's message
expect_fail "config 'K3_SPEC=7' run 1 failed: exit status 1: K3_SPEC: '7' is not 0 or 1" \
    "$DF" bench --model "$t/tiny" --tokens "1 2" --runs 2 --config K3_SPEC=0 --config K3_SPEC=7

# 6. Ctrl-C (to the whole process group, as a terminal sends it) stops bench and its child
setsid "$DF" bench --model "$t/small" --tokens "$p" --max-new 100000 --runs 3 >/dev/null 2>"$t/i.err" &
pid=$!
for _ in $(seq 50); do ls "$t/tmp"/deltafin-bench.*/run.err >/dev/null 2>&1 && break; sleep 0.1; done
sleep 0.3
kill -INT -- -"$pid"
rc=0; wait "$pid" || rc=$?
expect_eq 130 "$rc" "bench's exit status after Ctrl-C"
expect_grep "bench: interrupted" "$t/i.err"
if pgrep -s "$pid"; then fail "bench's children outlived it"; fi
expect_eq "" "$(ls -A "$t/tmp")" "what bench left in its TMPDIR"

# 7. the sanitizer build agrees on a short run
quietly "$DF_ASAN" bench --model "$t/tiny" --tokens "$p" --max-new 24 --runs 1 --config K3_SPEC=0 --config K3_MOE_TOP_K=1 \
    --config K3_STORE=stream,K3_RAM_GB=0.5 --json "$t/a.json"
"$PYTHON" -c "
import json
d = json.load(open('$t/a.json'))
exact = [int(x) for x in open('$t/exact').read().split()]
assert d['configs'][0]['tokens'] == exact and d['configs'][2]['tokens'] == exact
assert d['configs'][1]['tokens'] == [int(x) for x in open('$t/lossy').read().split()]
assert d['configs'][2]['read_mb_per_token']['median'] > 0
"
echo PASS
