#!/usr/bin/env bash
# scripts/cuda_bundle.sh (shown here on the release build; it packs a CUDA build the same way): the
# bundle runs its binary; on a machine whose loader knows none of the bundled libraries (a stand-in
# ldconfig that lists nothing) they all stay and the binary resolves every one of them from the
# bundle; on this machine, which has them all, none stays; a folder that is not empty and a
# binary that is not there are refused, naming them.
source "$(dirname "$0")/../lib.sh"
t="$DF_TEST_TMP/cuda_bundle"
mkdir -p "$t/fakebin"
printf '#!/bin/sh\necho "0 libs found in cache"\n' >"$t/fakebin/ldconfig"
chmod +x "$t/fakebin/ldconfig"

bash scripts/cuda_bundle.sh "$t/bare" "$DF" >"$t/out"
expect_grep "bundle.tar.xz" "$t/out"
PATH="$t/fakebin:$PATH" "$t/bare/run.sh" deltafin --version >"$t/version"
expect_grep "^deltafin " "$t/version"
kept=$(ls "$t/bare/lib" | wc -l)
[ "$kept" -gt 5 ] || { echo "only $kept libraries bundled"; exit 1; }
ls "$t/bare/lib" >"$t/libs"
expect_grep '^libjansson\.so' "$t/libs"
expect_no_grep -E '^(libc|libm|libstdc\+\+|libgcc_s)\.so' "$t/libs" || fail "glibc or the C++ runtime bundled"
from_bundle=$(LD_LIBRARY_PATH="$t/bare/lib" ldd "$t/bare/bin/deltafin" | grep -c "$t/bare/lib/")
[ "$from_bundle" = "$kept" ] || { echo "$from_bundle of $kept bundled libraries resolved from the bundle"; exit 1; }

bash scripts/cuda_bundle.sh "$t/here" "$DF" >/dev/null
"$t/here/run.sh" deltafin --version | expect_grep "^deltafin "
[ -z "$(ls "$t/here/lib")" ] || { echo "libraries this machine has were kept: $(ls "$t/here/lib")"; exit 1; }

expect_fail "cuda_bundle: $t/here is not empty" bash scripts/cuda_bundle.sh "$t/here" "$DF"
expect_fail "cuda_bundle: $t/missing: not an executable" bash scripts/cuda_bundle.sh "$t/none" "$t/missing"
echo ok
