#!/usr/bin/env bash
# Proves that the test suite bites: applies small deliberate faults, one at a time, to a COPY of
# the source tree, rebuilds the copy, runs the tests that guard the faulty code, and reports which
# of them failed. Every fault must be caught by at least one test (and so by `make test`, which
# runs them all); the script exits 1 if one is not. Not part of CI: it takes a while (one
# incremental build and a few test groups per fault). docs/TESTING.md holds its last result.
#
#   scripts/fault_inject.sh [--table FILE] [FAULT...]     (default: every fault below)
#   scripts/fault_inject.sh --list
#
# The copy is the working tree's tracked and unignored files, in a temporary directory (kept
# with KEEP=1), with the release build (build/) copied along when there is one so that the first
# build is incremental. The ASan build is not used: DF_ASAN points at the release binary.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

# fault -> AREA FILE WHAT OLD NEW TESTS (OLD must occur exactly once in FILE; TESTS: unit/NAME for
# build/tests/NAME, cli/NAME.sh for tests/cli/NAME.sh)
define() {
    case "$1" in
    gate-sign)
        AREA=kernels FILE=src/kernels/cpu/cpu_attention.c WHAT="KDA decay gate: the sign inside the sigmoid flipped"
        OLD='op_sigmoid(rate * (a->f[row + d]' NEW='op_sigmoid(-rate * (a->f[row + d]'
        TESTS="cli/test_reference.sh cli/test_model_invariants.sh" ;;
    l2n-epsilon)
        AREA=kernels FILE=src/kernels/vecops.c WHAT="L2 normalisation floor 1e-12 raised to 1e-6"
        OLD='norm > 1e-12 ? norm : 1e-12' NEW='norm > 1e-6 ? norm : 1e-6'
        TESTS="unit/test_ops cli/test_reference.sh" ;;
    mla-causal)
        AREA=kernels FILE=src/kernels/cpu/cpu_attention.c WHAT="latent MLA cache: a new row no longer attends to itself (off by one)"
        OLD='const int n = a->n + t; /* cached positions' NEW='const int n = a->n + t - 1; /* cached positions'
        TESTS="cli/test_reference.sh cli/test_model_invariants.sh" ;;
    commit-rows)
        AREA=model FILE=src/model/kda.c WHAT="speculation: a commit replays one kept row too few"
        OLD='DevKda a = kda_args(m, l, s->dev->kda[l], r.raw, r.f, r.beta_raw, 0, n);'
        NEW='DevKda a = kda_args(m, l, s->dev->kda[l], r.raw, r.f, r.beta_raw, 0, n - 1);'
        TESTS="unit/test_spec cli/test_spec.sh" ;;
    state-repoint)
        AREA=model FILE=src/model/devmem.c WHAT="one schedule: the CPU device's copy of a State not re-pointed after its MLA cache moved"
        OLD='    if (g->host) point_at_arrays(s);' NEW='    if (g->host && !s->dev->cap) point_at_arrays(s);'
        TESTS="cli/test_reference.sh unit/test_batch" ;;
    seq-state)
        AREA=model FILE=src/model/kda.c WHAT="one schedule: every sequence of a batch runs its KDA rows on the first sequence's State"
        OLD='DevKda a = kda_args(m, l, seqs[q].st->dev->kda[l],' NEW='DevKda a = kda_args(m, l, seqs[0].st->dev->kda[l],'
        TESTS="unit/test_batch" ;;
    window-undo)
        AREA=model FILE=src/model/k3.c WHAT="a prefill window stopped between its layers keeps the KDA states it changed"
        OLD='            restore_kda_states(m, seqs[0].st, l);' NEW='            (void)restore_kda_states;'
        TESTS="unit/test_window_stop" ;;
    window-progress)
        AREA=engine FILE=src/engine/engine.c WHAT="prefill progress: a window's layers counted from the window's end, not its start"
        OLD='p->o->progress(p->o->ctx, p->at + (size_t)p->T' NEW='p->o->progress(p->o->ctx, p->at + 2 * (size_t)p->T'
        TESTS="unit/test_window_stop" ;;
    cache-victim)
        AREA=model FILE=src/model/cache_index.c WHAT="expert cache: the last empty slot is not taken before evicting (off by one)"
        OLD='if (empty->n > 0) return empty->slot[0];' NEW='if (empty->n > 1) return empty->slot[0];'
        TESTS="unit/test_stream_store unit/test_residency_keys cli/test_stream.sh" ;;
    slot-span)
        AREA=store FILE=src/store/experts.c WHAT="expert cache: an expert's matrices start one byte late in its slot"
        OLD='s->buf + sp->offset % SHARD_ALIGN, key)' NEW='s->buf + sp->offset % SHARD_ALIGN + 1, key)'
        TESTS="unit/test_residency_keys cli/test_stream.sh cli/test_lookahead.sh" ;;
    slot-generation)
        AREA=store FILE=src/store/experts.c WHAT="expert cache: a refilled slot keeps its residency key's generation"
        OLD='    s->gen++; /* other bytes' NEW='    (void)s->gen; /* other bytes'
        TESTS="unit/test_residency_keys cli/test_stream.sh" ;;
    http-status)
        AREA=serve FILE=src/serve/request.c WHAT="an unknown model answered 400 instead of 404"
        OLD='return api_error(err, 404,' NEW='return api_error(err, 400,'
        TESTS="unit/test_serve_parts" ;;
    mxfp4-code)
        AREA=format FILE=src/format/numfmt.c WHAT="MXFP4: E2M1 code 3 decoded as 1.25 instead of 1.5"
        OLD='0.0f,  0.5f,  1.0f,  1.5f,' NEW='0.0f,  0.5f,  1.0f,  1.25f,'
        TESTS="unit/test_numfmt unit/test_kernels cli/test_reference.sh" ;;
    shard-overlap)
        AREA=format FILE=src/format/safetensors.c WHAT="safetensors: tensors overlapping by one byte accepted"
        OLD='if (s[i].offset < at)' NEW='if (s[i].offset + 1 < at)'
        TESTS="unit/test_format_hostile cli/test_corrupt.sh" ;;
    digit-pieces)
        AREA=text FILE=src/text/pretok.c WHAT="tokenizer: digits grouped by up to 4 instead of 3"
        OLD=$'UPPERISH "+" LOWERISH "*" CONTRACTION\n    "|\\\\p{N}{1,3}"'
        NEW=$'UPPERISH "+" LOWERISH "*" CONTRACTION\n    "|\\\\p{N}{1,4}"'
        TESTS="unit/test_tokenizer_encode unit/test_tokenizer_text cli/test_tokenizer.sh" ;;
    chat-escape)
        AREA=text FILE=src/text/xtml_render.c WHAT='chat format: a quote in an attribute escaped as &#34; instead of &quot;'
        OLD='sb_adds(out, "&quot;")' NEW='sb_adds(out, "&#34;")'
        TESTS="unit/test_xtml_render unit/test_xtml_parse unit/test_reply_grammar" ;;
    draft-accept)
        AREA=engine FILE=src/engine/session.c WHAT="speculation: a draft token checked against the wrong row (off by one)"
        OLD='s->pending_pos + 1 + (uint64_t)a, NULL) == in[a + 1]'
        NEW='s->pending_pos + 1 + (uint64_t)a, NULL) == in[a]'
        TESTS="unit/test_spec cli/test_spec.sh" ;;
    situ-series)
        AREA=kernels FILE=src/kernels/exactmath.h WHAT="exact SiTU: tanh's series term in y^5 with the wrong coefficient (2/15 as 2/16)"
        OLD='p = p * s + 0.13333333333333333;' NEW='p = p * s + 0.125;'
        TESTS="unit/test_exactmath" ;;
    record-experts)
        AREA=model FILE=src/model/ffn.c WHAT="CUDA graphs: a recording starts before the layer's expert launches, which it may not hold"
        OLD=$'    if (routed_experts(m, layer, T, hybrid)) return -1;\n    record_stretch(m);'
        NEW=$'    record_stretch(m);\n    if (routed_experts(m, layer, T, hybrid)) return -1;\n    record_stretch(m);'
        TESTS="unit/test_devpass" ;;
    kernel-fma)
        AREA=kernels FILE=src/kernels/kernels_impl.h WHAT="portable kernels: multiply, then add, instead of one fused multiply-add"
        OLD='acc[t].l[i] = fmaf(w[i], X[t * ldx + c + i], acc[t].l[i]);'
        NEW='acc[t].l[i] = w[i] * X[t * ldx + c + i] + acc[t].l[i];'
        TESTS="unit/test_kernels" ;;
    head-rows)
        AREA=kernels FILE=src/kernels/mat.c WHAT="per-head transposed product: a head's last row left out (off by one)"
        OLD=$'    for (int j = 0; j < n; j++)\n        for (int from = 0;'
        NEW=$'    for (int j = 0; j < n - 1; j++)\n        for (int from = 0;'
        TESTS="unit/test_kernels cli/test_reference.sh" ;;
    nll-window)
        AREA=cli FILE=src/cli/nll.c WHAT="nll --window: a window no longer starts from an empty state"
        OLD='        state_reset(st);' NEW='        (void)st;'
        TESTS="cli/test_nll.sh" ;;
    output-link)
        AREA=util FILE=src/util/fileio.c WHAT="outputs: a symbolic link is replaced by a regular file, not its target written"
        OLD='    if (link) { /* the link stays' NEW='    if (0) { /* the link stays'
        TESTS="cli/test_file_outputs.sh" ;;
    output-pipe)
        AREA=util FILE=src/util/fileio.c WHAT="outputs: a named pipe is no longer written through"
        OLD="if (kind == 'w') rc = write_through(target, data, n);"
        NEW="if (kind == 'w' && !S_ISFIFO(st.st_mode)) rc = write_through(target, data, n);"
        TESTS="cli/test_file_outputs.sh" ;;
    message-cr)
        AREA=util FILE=src/util/err.c WHAT="messages: a carriage return (a CRLF file's) quoted raw, not as \\r"
        OLD="if (*p >= 0x20 && *p != 0x7f) esc[0]" NEW="if ((*p >= 0x20 && *p != 0x7f) || *p == '\\r') esc[0]"
        TESTS="cli/test_file_outputs.sh cli/test_corrupt.sh" ;;
    trace-unchecked)
        AREA=engine FILE=src/engine/engine.c WHAT="K3_TRACE: a trace that could not be written no longer fails the command"
        OLD='    int rc = trace_close(&e->trace);' NEW='    int rc = 0 * trace_close(&e->trace);'
        TESTS="cli/test_file_outputs.sh" ;;
    empty-index)
        AREA=format FILE=src/format/index.c WHAT="index: an empty weight_map accepted"
        OLD='if (json_object_size(ix->weight_map) == 0)' NEW='if (json_object_size(ix->weight_map) == 0 && 0)'
        TESTS="cli/test_corrupt.sh" ;;
    revision-mix)
        AREA=fetch FILE=src/fetch/response.c WHAT="install: bytes of another commit or file version accepted"
        OLD=$'errlen) {\n    char a[32], b[32];' NEW=$'errlen) {\n    return 0;\n    char a[32], b[32];'
        TESTS="unit/test_install_parts cli/test_install_hostile.sh" ;;
    range-200)
        AREA=fetch FILE=src/fetch/response.c WHAT="install: a 200 to a range request retried as if transient"
        OLD='    if (r->status == 200)' NEW='    if (r->status == 200 && (*transient = 1))'
        TESTS="unit/test_install_parts cli/test_install_faults.sh" ;;
    dns-retry)
        AREA=fetch FILE=src/fetch/http.c WHAT="install: a host name that does not resolve retried as if transient"
        OLD=$'    case CURLE_COULDNT_RESOLVE_HOST:\n    case CURLE_COULDNT_RESOLVE_PROXY:'
        NEW=$'    case CURLE_COULDNT_RESOLVE_PROXY:'
        TESTS="cli/test_install_hostile.sh" ;;
    doctor-tokenizer)
        AREA=cli FILE=src/cli/doctor.c WHAT="doctor: a tokenizer that does not parse is not counted against the install"
        OLD='    int bad = check_tokenizer(in);' NEW='    int bad = check_tokenizer(in) && 0;'
        TESTS="cli/test_install_hostile.sh" ;;
    *) return 1 ;;
    esac
}
ALL=(gate-sign l2n-epsilon mla-causal cache-victim slot-span slot-generation http-status mxfp4-code shard-overlap
     digit-pieces chat-escape draft-accept kernel-fma head-rows nll-window output-link output-pipe message-cr
     trace-unchecked empty-index revision-mix range-200 dns-retry doctor-tokenizer situ-series record-experts
     commit-rows state-repoint seq-state window-undo window-progress)

table="" faults=()
while [ $# -gt 0 ]; do
    case "$1" in
    --table) table="$2"; shift 2 ;;
    --list) for f in "${ALL[@]}"; do define "$f"; printf '%-16s %-8s %s\n' "$f" "$AREA" "$WHAT"; done; exit 0 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) define "$1" || { echo "fault_inject: unknown fault '$1' (--list)"; exit 2; }; faults+=("$1"); shift ;;
    esac
done
[ ${#faults[@]} -gt 0 ] || faults=("${ALL[@]}")

work=$(mktemp -d /tmp/deltafin-faults.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
echo "fault_inject: copy in $work"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work"
[ -d build ] && cp -a build "$work/"
cd "$work"
export DF="$work/build/deltafin" DF_ASAN="$work/build/deltafin" PYTHON="${PYTHON:-/usr/bin/python3}"
jobs="${JOBS:-2}"

build() { nice -n 10 make -j"$jobs" all >"$work/build.log" 2>&1; }

# Runs one test; returns its status (logs in $work/logs).
run_test() { # label, test
    local label=$1 t=$2 log="$work/logs/$1.${2//\//_}.log"
    mkdir -p "$work/logs" "$work/tmp/$label"
    export DF_TEST_TMP="$work/tmp/$label/${t//\//_}"
    rm -rf "$DF_TEST_TMP" && mkdir -p "$DF_TEST_TMP"
    case "$t" in
    unit/*) timeout 900 nice -n 10 "build/tests/${t#unit/}" >"$log" 2>&1 ;;
    cli/*) timeout 900 nice -n 10 bash "tests/cli/${t#cli/}" >"$log" 2>&1 ;;
    esac
}

# Replaces OLD by NEW in FILE (exactly one occurrence), keeping the original in FILE.orig.
apply() {
    cp "$FILE" "$FILE.orig"
    "$PYTHON" - "$FILE" "$OLD" "$NEW" <<'PY'
import sys
path, old, new = sys.argv[1:4]
s = open(path).read()
n = s.count(old)
if n != 1:
    sys.exit(f"{path}: the fault's text occurs {n} times (1 expected)")
open(path, "w").write(s.replace(old, new))
PY
}
restore() { mv "$FILE.orig" "$FILE" && touch "$FILE"; }

echo "fault_inject: building the copy"
build || { echo "fault_inject: the unmodified copy does not build ($work/build.log)"; exit 2; }
declare -A wanted=()
for f in "${faults[@]}"; do define "$f"; for t in $TESTS; do wanted[$t]=1; done; done
echo "fault_inject: baseline (no fault): ${!wanted[*]}"
for t in "${!wanted[@]}"; do
    run_test baseline "$t" || { echo "fault_inject: $t fails without any fault ($work/logs kept): fix that first"; trap - EXIT; exit 2; }
done

rows=() missed=0
for f in "${faults[@]}"; do
    define "$f"
    t0=$SECONDS
    apply || exit 2
    if ! build; then
        restore
        echo "fault_inject: $f does not compile ($work/build.log)"; exit 2
    fi
    caught=()
    for t in $TESTS; do run_test "$f" "$t" || caught+=("$t"); done
    restore
    if [ ${#caught[@]} -eq 0 ]; then
        missed=1; verdict="**NOT CAUGHT**"
    else
        verdict=$(printf '`%s` ' "${caught[@]}"); verdict=${verdict% }
    fi
    echo "fault_inject: $f ($AREA, $((SECONDS - t0)) s): caught by ${caught[*]:-nothing} (of: $TESTS)"
    rows+=("| \`$f\` | $AREA | \`$FILE\`: $WHAT | $verdict |")
done
build >/dev/null 2>&1 # leave the copy as it was

out=$(printf '| fault | area | what was broken | failing tests |\n|---|---|---|---|\n'; printf '%s\n' "${rows[@]}")
echo "$out"
[ -z "$table" ] || { cd "$repo" && echo "$out" >"$table"; }
if [ "$missed" -ne 0 ]; then
    echo "fault_inject: FAILED: a fault went unnoticed"
    exit 1
fi
echo "fault_inject: ok: every fault was caught"
