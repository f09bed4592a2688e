#!/usr/bin/env bash
# Layer-major prefill: a prompt goes through the model one window of rows at a time (the window the
# memory plan sizes, K3_PREFILL_WINDOW), each layer reading each routed expert once per window. Streamed
# under a budget smaller than the model, the expert bytes a prompt of 512, 2,048 and 8,192 tokens
# reads are at most 1.15x the distinct experts its windows route to per layer (counted from the
# router trace, K3_TRACE) times an expert's read (its span in whole 4 KiB pages, as O_DIRECT reads it:
# 2% more than the span on the synth model, 19% on the bundled one's small experts); the process
# stays within the budget (peak RSS);
# and the logits equal those of one position per pass (--chunk 1), bit for bit. The bundled model
# too, streamed with an expert cache smaller than one layer's experts.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line (the window, the memory plan)
t="$DF_TEST_TMP/prefill_window"
mkdir -p "$t"
big="$t/big"
quietly "$DF" synth --preset big --size-gb 0.1 --seed 3 --out "$big" --quiet
tokens() { awk -v n="$1" -v v="$2" 'BEGIN { srand(3); for (i = 0; i < n; i++) printf "%d ", 1 + int(rand() * (v - 2)) }'; }
span_of() { "$DF" inspect "$1" | sed -n 's/^per expert *\([0-9]*\) bytes.*/\1/p'; }

# Prefill of n tokens, streamed: checks the bytes against the trace and the RSS against the budget.
# usage: prefill LABEL MODEL N VOCAB BUDGET_GB [env...]
prefill() {
    local label=$1 model=$2 n=$3 vocab=$4 budget=$5
    shift 5
    rm -f "$t/trace.jsonl"
    tokens "$n" "$vocab" >"$t/prompt"
    env K3_STORE=stream K3_RAM_GB="$budget" K3_CONTEXT=9000 K3_TRACE="$t/trace.jsonl" "$@" /usr/bin/time -f "rss %M" \
        "$DF" run -m "$model" --tokens "$(cat "$t/prompt")" -n 1 --stats-json "$t/stats.json" >/dev/null 2>"$t/err" ||
        { cat "$t/err"; fail "$label: the run failed"; }
    "$PYTHON" - "$t" "$n" "$(span_of "$model")" "$budget" "$label" <<'EOF'
import json, re, sys
t, n, span, budget, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
err = open(t + "/err").read()
window = int(re.search(r"prefill window (\d+)", err).group(1))
rss_kb = int(re.search(r"^rss (\d+)", err, re.M).group(1))
stats = json.load(open(t + "/stats.json"))
read = stats["read"]["expert_bytes"] - stats["read"]["decode_expert_bytes"]
rows = [json.loads(line)["layers"] for line in open(t + "/trace.jsonl")][:n]
assert len(rows) == n, f"{label}: the trace holds {len(rows)} positions, not {n}"
# the windows: the short one first (engine_feed), then whole windows
first = n % window or window
bounds = [0] + [first + window * i for i in range((n - first) // window + 1)]
distinct = 0
for a, b in zip(bounds, bounds[1:]):
    per_layer = {}
    for row in rows[a:b]:
        for layer, sel in row.items(): per_layer.setdefault(layer, set()).update(sel)
    distinct += sum(len(s) for s in per_layer.values())
# an expert is read with O_DIRECT as whole 4 KiB pages: its span rounded up to pages, and one more
# page when it straddles one boundary more (it need not start on a page)
read_unit = (span + 4095) // 4096 * 4096 + 4096
ratio = read / (distinct * read_unit)
print(f"{label}: {n} tokens in {len(bounds) - 1} window(s) of up to {window}: read {read / 1e6:.1f} MB of experts, "
      f"{ratio:.3f}x the {distinct} distinct experts the windows route to; peak RSS {rss_kb / 1e3:.0f} MB of a "
      f"{budget * 1e3:.0f} MB budget; {stats['prefill_tokens_per_s']:.1f} tokens/s")
if ratio > 1.15: sys.exit(f"FAIL: {label}: the expert bytes read are {ratio:.3f}x the distinct experts routed (at most 1.15x)")
if rss_kb * 1e3 > budget * 1e9: sys.exit(f"FAIL: {label}: peak RSS {rss_kb} KB exceeds the budget {budget} GB")
EOF
}

# The synth model (0.38 GB: one MoE layer of 896 experts) under a 0.33 GB budget.
model_bytes=$(du -sb "$big" | cut -f1)
[ "$model_bytes" -gt 330000000 ] || fail "the synth model is only $model_bytes bytes: not larger than the budget"
for n in 512 2048 8192; do prefill "big" "$big" "$n" 4000 0.33; done
# A window the plan would not choose: the bound holds per window whatever its size.
prefill "big, 1000-row window" "$big" 2048 4000 0.33 K3_PREFILL_WINDOW=1000
# The bundled model, its expert cache smaller than a layer's 64 experts (a few dozen slots: the budget from
# the plan of a generous one), with a 2,048-row window.
K3_STORE=stream K3_RAM_GB=0.3 K3_CONTEXT=9000 K3_PREFILL_WINDOW=2048 "$DF" run --tokens "1 2 3" -n 1 >/dev/null 2>"$t/plan" ||
    { cat "$t/plan"; fail "k3-mini: the plan"; }
mini_budget=$("$PYTHON" - "$t/plan" <<'EOF'
import re, sys
line = [l for l in open(sys.argv[1]) if "streaming:" in l][0]
fixed = float(re.search(r"fixed ([0-9.]+) MB", line).group(1)) * 1e6
spine = float(re.search(r"layers pinned \(([0-9.]+) GB\)", line).group(1)) * 1e9
slot = float(re.search(r"= \d+ x ([0-9.]+) MB", line).group(1)) * 1e6
print(f"{(fixed + spine + 10 * slot) / 1e9:.4f}")
EOF
)
for n in 512 2048; do prefill "k3-mini" models/k3-mini "$n" 8000 "$mini_budget" K3_PREFILL_WINDOW=2048; done
expect_grep "expert cache [0-9.]* GB = [1-5][0-9] x" "$t/err" || fail "k3-mini: the expert cache is not smaller than a layer's experts"

# The bits: windowed prefill (mapped and streamed) equals one position per pass.
tokens 700 4000 >"$t/p700"
K3_STORE=mapped "$DF" logits -m "$big" --tokens "$(cat "$t/p700")" --chunk 1 -o "$t/one.f32" 2>"$t/e1" || { cat "$t/e1"; fail "chunk 1"; }
K3_STORE=stream K3_RAM_GB=0.33 "$DF" logits -m "$big" --tokens "$(cat "$t/p700")" -o "$t/window.f32" 2>"$t/e2" ||
    { cat "$t/e2"; fail "windowed"; }
cmp "$t/one.f32" "$t/window.f32" || fail "big: windowed prefill (streamed) differs from one position per pass"
tokens 1500 8000 >"$t/p1500"
"$DF" logits --tokens "$(cat "$t/p1500")" --chunk 1 -o "$t/mini1.f32" 2>"$t/e3" || { cat "$t/e3"; fail "k3-mini chunk 1"; }
for w in 0 600; do # the plan's window (1,500 rows in one pass: attention in groups of 512) and windows of 600
    K3_PREFILL_WINDOW=$w "$DF" logits --tokens "$(cat "$t/p1500")" -o "$t/miniw.f32" 2>"$t/e4" || { cat "$t/e4"; fail "k3-mini window $w"; }
    cmp "$t/mini1.f32" "$t/miniw.f32" || fail "k3-mini: prefill window $w differs from one position per pass"
done
echo "ok: windowed prefill reads each routed expert once per window, within the budget, bit-identical to --chunk 1"
