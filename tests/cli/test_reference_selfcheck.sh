#!/usr/bin/env bash
# The float64 reference's pieces match hand-derived values and algebraically different evaluations,
# and it runs end to end on small checkpoints written by tests/reference/ckpt_writer.py.
source "$(dirname "$0")/../lib.sh"
exec "${PYTHON:-/usr/bin/python3}" "$(dirname "$0")/../reference/test_ref_selfcheck.py" "${DF_TEST_TMP:-/tmp}/k3ref-selfcheck"
