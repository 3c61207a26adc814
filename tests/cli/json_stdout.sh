#!/usr/bin/env bash
# A command's --json output is stdout alone (logs go to stderr), and plan-memory plans what serve
# would run: --batch-invariant's attention cut, or VLLM_BATCH_INVARIANT=1's (the demo model's
# decode steps then keep no split partials), and its refusal of block-FP8 checkpoints on a GPU.
# The GPU kind is planned in meta mode, so no GPU is needed. bench --timeline is refused on the
# CPU.
#   json_stdout.sh MLASERVE_BIN SOURCE_DIR
set -uo pipefail
bin="$1" src="$2"
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

plan=(plan-memory --model "$src/models/demo-glm5" --device cuda:0 --profile-mode meta
  --device-memory-bytes 80GiB --max-num-seqs 64 --json)
decode_bytes() {  # the plan's rank-0 decode workspace, from stdout alone
  "$bin" "${plan[@]}" "$@" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["ranks"][0]["decode_workspace_bytes"])'
}
default=$(decode_bytes) || fail "plan-memory --json: stdout is not one JSON object"
invariant=$(decode_bytes --batch-invariant) || fail "plan-memory --batch-invariant --json"
from_env=$(VLLM_BATCH_INVARIANT=1 decode_bytes) || fail "VLLM_BATCH_INVARIANT=1 plan-memory --json"
echo "decode workspace: default ${default:-?} B, batch-invariant ${invariant:-?} B (env ${from_env:-?} B)"
[[ ${from_env:-} == "${invariant:-x}" ]] || fail "VLLM_BATCH_INVARIANT=1 planned otherwise than the flag"
if [[ -n ${default:-} && -n ${invariant:-} ]] && ((invariant >= default)); then
  fail "the batch-invariant plan keeps the split partials ($invariant >= $default bytes)"
fi

err=$("$bin" plan-memory --model "$src/tests/data/tiny-glm5-fp8" --device cuda:0 --profile-mode meta \
  --device-memory-bytes 80GiB --batch-invariant 2>&1 >/dev/null)
rc=$?
if [[ $rc != 1 || ! $err =~ "block-FP8" ]]; then
  fail "block-FP8 with --batch-invariant on the GPU: exit $rc (want 1), stderr: ${err:0:300}"
else
  echo "ok   block-FP8 refused: $err"
fi

# bench --timeline times a GPU against its host: refused on the CPU, before the model loads.
err=$("$bin" bench --model "$src/models/demo-glm5" --batch 1 --input-len 8 --output-len 1 \
  --timeline 2>&1 >/dev/null)
rc=$?
if [[ $rc != 1 || ! $err =~ "--timeline" ]]; then
  fail "bench --timeline on the CPU: exit $rc (want 1), stderr: ${err:0:300}"
else
  echo "ok   bench --timeline refused on the CPU: $err"
fi

[[ $failures == 0 ]] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
