#!/usr/bin/env bash
# One training run on the GPU machine, within its limits (10 minutes a command; at most 8 files of
# at most 16 MiB come back from $OUT). Run from the repository root:
#
#   bash tools/train/gpu_run.sh BUNDLE [MINUTES] [train.py options...]
#
# BUNDLE is a tar (plain, .gz or .xz) of the data directory: train.bin, valid.bin, optionally
# chat_train.bin / chat_valid.bin with their .mask files and data.json, and the tokenizer files
# tiktoken.model and tokenizer_config.json (a top-level folder inside the tar is fine). MINUTES
# (default 8.5) is the budget of the whole run, counted from this script's start: unpacking,
# training, the final measurements and the export. Options after MINUTES go to train.py (default
# shape: mini); --init-from DIR continues from a checkpoint that an earlier run brought back (DIR
# holding its shards and model-meta.tar, which is unpacked there first).
#
# $OUT receives: the checkpoint's model-*.safetensors shards (each < 16 MiB), model-meta.tar (its
# config, generation config, index, tokenizer files and SHA256SUMS), metrics.json and train.log.
# Put the checkpoint together with:
#   mkdir -p DIR && cp model-*.safetensors DIR/ && tar -xf model-meta.tar -C DIR && (cd DIR && sha256sum -c SHA256SUMS)
set -euo pipefail
start=$(date +%s.%N)
bundle=${1:?usage: gpu_run.sh BUNDLE [MINUTES] [train.py options...]}
minutes=${2:-8.5}
shift $(( $# >= 2 ? 2 : 1 ))
: "${OUT:?OUT must name the folder that comes back}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

work=$(mktemp -d /tmp/k3train.XXXXXX)
tar -xf "$bundle" -C "$work"
data=$(dirname "$(find "$work" -name train.bin -print -quit)")
[ -f "$data/train.bin" ] || { echo "gpu_run: no train.bin in $bundle" >&2; exit 1; }
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = --init-from ] && [ -f "${args[$((i + 1))]}/model-meta.tar" ]; then
        tar -xf "${args[$((i + 1))]}/model-meta.tar" -C "${args[$((i + 1))]}"
    fi
done
echo "gpu_run: data in $data ($(du -sh "$data" | cut -f1)), unpacked in $("${PYTHON:-python3}" -c "import time; print(round(time.time() - $start, 1))") s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

set +e
"${PYTHON:-python3}" tools/train/train.py --shape mini --data "$data" --out "$work/model" --metrics "$OUT/metrics.json" \
    --minutes "$minutes" --started-at "$start" "${args[@]}" 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
set -e
if [ -d "$work/model" ]; then
    mv "$work"/model/model-*.safetensors "$OUT/"
    tar -cf "$OUT/model-meta.tar" -C "$work/model" .
    ls -l "$OUT"
fi
exit "$rc"
