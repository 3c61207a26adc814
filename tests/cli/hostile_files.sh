#!/usr/bin/env bash
# Local model files are untrusted input too: each hostile file below must make the CLI exit 1
# with a clear error naming the problem, never crash (a signal) or hang.
#   hostile_files.sh MLASERVE_BIN SOURCE_DIR
set -uo pipefail
bin="$1" src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME PATTERN CMD...: CMD exits 1 and its stderr matches PATTERN.
expect() {
  local name="$1" pattern="$2"
  shift 2
  local err rc
  err="$(timeout 60 "$@" 2>&1 >/dev/null)"
  rc=$?
  if [[ $rc == 1 && "$err" =~ $pattern ]]; then
    echo "ok   $name: $err"
  else
    echo "FAIL $name: exit $rc (want 1), stderr: ${err:0:400}"
    failures=$((failures + 1))
  fi
}

nested() {  # nested N OPEN CLOSE INNER
  python3 -c "import sys; n=int(sys.argv[1]); print(sys.argv[2]*n + sys.argv[4] + sys.argv[3]*n, end='')" "$@"
}

# A tokenizer directory whose chat template is $1.
template_dir() {
  local d="$tmp/tpl$RANDOM"
  mkdir -p "$d"
  cp "$src/tests/data/tok-glm/tokenizer.json" "$d/"
  printf '%s' "$1" >"$d/chat_template.jinja"
  echo "$d"
}
echo '{"messages": [{"role": "user", "content": "hi"}]}' >"$tmp/request.json"

expect "recursive macro" "nests deeper than 256 levels while rendering" \
  "$bin" chat-template --model "$(template_dir '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}')" \
  --request-file "$tmp/request.json"
expect "nested expression" "nests deeper than 128 levels" \
  "$bin" chat-template --model "$(template_dir "{{ $(nested 20000 '(' ')' 1) }}")" \
  --request-file "$tmp/request.json"
expect "long operator chain" "an expression nests deeper than 128 levels" \
  "$bin" chat-template --model "$(template_dir "{{ 1$(python3 -c "print(' + 1' * 50000, end='')") }}")" \
  --request-file "$tmp/request.json"
expect "huge string repetition" "a string of more than 67108864 bytes" \
  "$bin" chat-template --model "$(template_dir '{{ "a" * 2000000000 }}')" \
  --request-file "$tmp/request.json"
expect "string doubling" "more than 67108864 bytes" \
  "$bin" chat-template \
  --model "$(template_dir '{% set ns = namespace(s="ab") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}')" \
  --request-file "$tmp/request.json"
nested 16000 '[' ']' '1' | python3 -c "import json,sys; print(json.dumps({'messages': [{'role': 'assistant', 'tool_calls': [{'function': {'name': 'f', 'arguments': sys.stdin.read()}}]}]}))" >"$tmp/deep_request.json"
expect "deeply nested tool arguments" "tool call arguments of 'f': JSON nests deeper than 128 levels" \
  "$bin" chat-template --model "$(template_dir '{{ messages }}')" --request-file "$tmp/deep_request.json"

# tokenizer.json ids.
for id in -1 4294967296 1.5 '"7"'; do
  d="$tmp/tok$RANDOM"
  mkdir -p "$d"
  python3 - "$src/tests/data/tok-glm/tokenizer.json" "$d/tokenizer.json" "$id" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["added_tokens"][0]["id"] = json.loads(sys.argv[3])
json.dump(j, open(sys.argv[2], "w"))
PY
  echo hi >"$d/text.txt"
  expect "tokenizer.json id $id" "added_tokens: token id .* is not an integer in \[0, 4194304\)" \
    "$bin" tokenize --model "$d" --text-file "$d/text.txt"
done
d="$tmp/tokdeep"
mkdir -p "$d"
nested 100000 '{"a":' '}' '1' >"$d/tokenizer.json"
expect "tokenizer.json nesting" "tokenizer.json: JSON nests deeper than 128 levels" \
  "$bin" tokenize --model "$d" --text-file "$tmp/request.json"

# config.json and safetensors headers.
d="$tmp/cfg"
mkdir -p "$d"
nested 100000 '[' ']' '1' >"$d/config.json"
expect "config.json nesting" "config.json: JSON nests deeper than 128 levels" \
  "$bin" plan-memory --model "$d" --load-format dummy
d="$tmp/st"
mkdir -p "$d"
cp "$src/tests/data/tiny-glm5/config.json" "$d/"
python3 - "$d/model.safetensors" <<'PY'
import json, struct, sys
shape = "[" * 20000 + "1" + "]" * 20000
h = ('{"w": {"dtype": "F32", "shape": ' + shape + ', "data_offsets": [0, 4]}}').encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))
PY
expect "safetensors nested shape" "model.safetensors: header: JSON nests deeper than 128 levels" \
  "$bin" plan-memory --model "$d"

[[ $failures == 0 ]] || { echo "$failures failure(s)"; exit 1; }
