#!/usr/bin/env bash
# `mpirun -np 2` against the single-process run of the same tensor-parallel size, for one model:
# logits of a 70-token prompt prefilled in 32-token steps must be bitwise equal (the MPI
# communicator sums in rank order, as the in-process one), and greedy generation over a batch
# of three prompts (chunked prefill, then decodes) must give the same tokens. Tensor-parallel
# sizes 2 (one rank per process) and 4 (two ranks per process), each with and without
# sequence parallelism. `--bind-to none`: mpirun's default binds each process to one core,
# and OpenBLAS then runs one thread, whose GEMM rounding differs from two threads' (the single
# process's) at the 1e-6 level.
# Usage: equivalence.sh MLASERVE MPIRUN MODEL_DIR
set -euo pipefail
bin=$1 mpirun=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2)

ids() { seq "$1" "$2" | awk '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 1000 }'; }
prompt=$(ids 0 69)
printf '[%s]\n[%s]\n[%s]\n' "$(ids 100 112)" "$(ids 200 240)" "$(ids 300 302)" >"$tmp/prompts"

for cfg in "2" "2 --sequence-parallel" "4" "4 --sequence-parallel"; do
  read -r tp sp <<<"$cfg"
  flags=(--model "$model" --tensor-parallel-size "$tp" ${sp:+"$sp"} --max-num-batched-tokens 32)
  "$bin" logits "${flags[@]}" --prompt-ids "$prompt" --out "$tmp/one.safetensors"
  "${mpi[@]}" "$bin" logits "${flags[@]}" --prompt-ids "$prompt" --out "$tmp/mpi.safetensors"
  if ! cmp -s "$tmp/one.safetensors" "$tmp/mpi.safetensors"; then
    echo "FAIL: $(basename "$model") tp=$tp $sp: logits under mpirun -np 2 differ from one process"
    exit 1
  fi
  gen=(generate "${flags[@]}" --prompt-file "$tmp/prompts" --max-tokens 12 --ignore-eos)
  one=$("$bin" "${gen[@]}" 2>/dev/null)
  two=$("${mpi[@]}" "$bin" "${gen[@]}" 2>/dev/null)
  if [[ "$one" != "$two" || $(wc -l <<<"$one") -ne 3 ]]; then
    printf 'FAIL: %s tp=%s %s: greedy tokens differ\none process:\n%s\nmpirun -np 2:\n%s\n' \
      "$(basename "$model")" "$tp" "$sp" "$one" "$two"
    exit 1
  fi
  echo "ok: $(basename "$model") tp=$tp $sp: logits bitwise equal, greedy tokens equal"
done
