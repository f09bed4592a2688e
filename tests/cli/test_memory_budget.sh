#!/usr/bin/env bash
# The memory budget holds on the mapped path too: K3_STORE=auto maps a checkpoint only when the
# whole of it plus what decoding needs (the streaming plan's fixed needs: States, the MLA cache at
# the planned context, scratch, runtime) fits the budget. With a budget just above the shard bytes
# the process either streams within the budget or refuses naming K3_RAM_GB; it never maps the
# model and runs past the budget (it used to, by 46%). Peak RSS from /usr/bin/time.
source "$(dirname "$0")/../lib.sh"
export DELTAFIN_VERBOSE=1 # the checks below read the full start-up line
t="$DF_TEST_TMP/memory_budget"
mkdir -p "$t"
"$DF" synth --preset small --seed 3 --out "$t/small" --quiet >/dev/null
"$DF" synth --preset big --size-gb 0.25 --out "$t/big" --quiet >/dev/null
shard_bytes() { cat "$1"/*.safetensors | wc -c; }
ids=$("$PYTHON" -c "import random; random.seed(5); print(' '.join(str(random.randrange(1000)) for _ in range(300)))")

# run_at MODEL GB: runs a 300-token prompt and one new token under K3_RAM_GB=GB; sets RC, RSS (bytes)
run_at() {
    RC=0
    K3_RAM_GB="$2" /usr/bin/time -f %M -o "$t/rss" "$DF" run --model "$1" --tokens "$ids" --max-new 1 >/dev/null 2>"$t/err" || RC=$?
    RSS=$(($(tail -n1 "$t/rss") * 1024))
}
gb() { "$PYTHON" -c "print(f'{$1 / 1e9:.6f}')"; }

# 1. the small model (20 MB of shards) at 1.05x its shard bytes: decoding alone needs more than
# that, so it must refuse or stay inside the budget
s=$(shard_bytes "$t/small")
budget=$((s * 105 / 100))
run_at "$t/small" "$(gb $budget)"
if [ "$RC" -eq 0 ]; then
    [ "$RSS" -le "$budget" ] || fail "small: peak RSS $RSS bytes exceeds the budget $budget ($(head -1 "$t/err" | cut -c1-160))"
else
    expect_grep "K3_RAM_GB" "$t/err" || fail "small: refused without naming K3_RAM_GB"
fi
echo "small: budget $budget, exit $RC, peak RSS $RSS"

# 2. the big model at 1.03x its shard bytes: streamed, within the budget
b=$(shard_bytes "$t/big")
budget=$((b * 103 / 100))
run_at "$t/big" "$(gb $budget)"
[ "$RC" -eq 0 ] || fail "big at 1.03x: $(cat "$t/err")"
expect_grep "experts local [0-9/]* (streamed)" "$t/err" || fail "big at 1.03x was not streamed"
[ "$RSS" -le "$budget" ] || fail "big at 1.03x: peak RSS $RSS exceeds the budget $budget"
echo "big: budget $budget, streamed, peak RSS $RSS"

# 3. with room for the model and its working memory it is still mapped
run_at "$t/big" "$(gb $((b + 600000000)))"
[ "$RC" -eq 0 ] && expect_grep "experts local [0-9/]* (mapped)" "$t/err" || fail "big with room"

# 4. --store mapped with a budget it cannot keep to is refused, saying so (it used to map and run
# past the budget); without a budget given, --store mapped maps whatever the size
expect_fail "^deltafin: --store mapped cannot keep to the memory budget of 0.01 GB (--ram-gb)" \
    "$DF" run --model "$t/small" --tokens "1 2" --max-new 1 --store mapped --ram-gb 0.01
"$DF" run --model "$t/small" --tokens "1 2" --max-new 1 --store mapped >/dev/null 2>"$t/err"
expect_grep "experts local [0-9/]* (mapped)" "$t/err" || fail "--store mapped did not map"
echo PASS
