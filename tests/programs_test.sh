#!/usr/bin/env bash
# Every shipped program answers --help (exit 0, a usage text) and turns a missing file or a bad
# argument into an error message and exit status 1: never an uncaught exception, an abort or a
# signal. Usage: programs_test.sh BIN_DIR
set -u
bin=$1
fail=0
check() {  # check NAME EXPECTED_STATUS ARGS...
  local name=$1 want=$2; shift 2
  out=$(timeout 60 "$bin/$name" "$@" 2>&1)
  local status=$?
  if [ "$want" = 0 ]; then
    if [ $status -ne 0 ] || ! echo "$out" | grep -qi "usage"; then
      echo "FAIL: $name $* -> status $status, no usage"; fail=1
    fi
  elif [ $status -ne 1 ] || ! echo "$out" | grep -qi "error"; then
    echo "FAIL: $name $* -> status $status (want 1 and an error message): $(echo "$out" | tail -2)"; fail=1
  fi
}
for p in foundry bench_infer bench_finetune bench_train_step bench_ops_vs_torch bench_optim_vs_torch bench_track_log tokenize_bench bench_prefill_loop; do
  [ -x "$bin/$p" ] || { echo "SKIP: $p not built"; continue; }
  check "$p" 0 --help
done
[ -x "$bin/foundry" ] && check foundry 1 generate --model /nonexistent/model --input-ids 1,2
if [ -x "$bin/foundry" ]; then
  out=$("$bin/foundry" no_such_command 2>&1); status=$?
  { [ $status -eq 1 ] && echo "$out" | grep -q "unknown command 'no_such_command'"; } ||
    { echo "FAIL: foundry no_such_command -> status $status: $out"; fail=1; }
fi
[ -x "$bin/foundry" ] && check foundry 1 train --config /nonexistent.toml
# template with a model path that names nothing rendered ChatML behind a warning.
if [ -x "$bin/foundry" ]; then
  msgs=$(mktemp); echo '[{"role": "user", "content": "hi"}]' > "$msgs"
  out=$("$bin/foundry" template --model /nonexistent/model --messages "$msgs" 2>&1); status=$?
  { [ $status -eq 1 ] && echo "$out" | grep -q "no such model folder or file"; } || { echo "FAIL: template -> $status: $out"; fail=1; }
  rm -f "$msgs"
fi
# A directory where a file belongs is named as such (it read as an empty file: "no data path given").
for args in "train --config ${TMPDIR:-/tmp}" "prepare --input ${TMPDIR:-/tmp} --out ${TMPDIR:-/tmp}/foundry-no-prep-$$"; do
  out=$("$bin/foundry" $args 2>&1); status=$?
  { [ $status -eq 1 ] && echo "$out" | grep -q "is a directory, not a file"; } || { echo "FAIL: foundry $args -> $status: $out"; fail=1; }
done
[ -x "$bin/foundry" ] && check foundry 1 serve --model /nonexistent/model --port 0
[ -x "$bin/foundry" ] && check foundry 1 chat --model /nonexistent/model
[ -x "$bin/foundry" ] && check foundry 1 embed --model /nonexistent/model --text hi
[ -x "$bin/foundry" ] && check foundry 1 eval --model /nonexistent/model --tasks /nonexistent/task.yaml
[ -x "$bin/foundry" ] && check foundry 1 fingerprint --models /nonexistent/model --datasets /nonexistent.txt --out /tmp/x
[ -x "$bin/foundry" ] && check foundry 1 membership --model /nonexistent/model --documents /nonexistent.jsonl --out /tmp/x
[ -x "$bin/foundry" ] && check foundry 1 attribute --presence /nonexistent.csv --scores /nonexistent.csv --out /tmp/x.json
[ -x "$bin/foundry" ] && check foundry 1 memorization --model /nonexistent/model --corpus /nonexistent.txt --out /tmp/x.json
[ -x "$bin/foundry" ] && check foundry 1 ops --dump-samples "${TMPDIR:-/tmp}/foundry-no-samples-$$" --only no_such_op
# Values that were taken silently (NaN / -1 temperatures as greedy, seeds wrapping around, counts
# below 0 as "unset", an empty id as nothing): refused at the command line, naming the option.
if [ -x "$bin/foundry" ]; then
  while read -r opt args; do
    out=$(timeout 20 "$bin/foundry" $args 2>&1); status=$?
    { [ $status -eq 1 ] && echo "$out" | grep -q -- "$opt"; } || { echo "FAIL: foundry $args -> status $status: $out"; fail=1; }
  done <<'CASES'
--temperature generate --model /nonexistent --input-ids 1 --temperature inf
--temperature chat --model /nonexistent --temperature nan
--temperature chat --model /nonexistent --temperature -1
--temperature memorization --model /nonexistent --corpus /nonexistent --out /tmp/x --temperature -1
--seed generate --model /nonexistent --input-ids 1 --seed -1
--seed chat --model /nonexistent --seed -1
limit eval --model /nonexistent --tasks /nonexistent --limit -1
num_fewshot eval --model /nonexistent --tasks /nonexistent --num-fewshot -1
--max-loss memorization --model /nonexistent --corpus /nonexistent --out /tmp/x --max-loss nan
--min-chars memorization --model /nonexistent --corpus /nonexistent --out /tmp/x --min-chars -1
--max-steps train --config /nonexistent.toml --max-steps 0
--steps finetune --model /nonexistent --data /nonexistent --out /tmp/x --steps -1
CASES
fi
# An empty key or token (an unset shell variable) would leave the server open: refused by name.
if [ -x "$bin/foundry" ]; then
  for args in "serve --model /nonexistent/model --api-key=" "dashboard --dir /nonexistent --token=" \
              "serve --model /nonexistent/model --max-body -1" "dashboard --dir /nonexistent --max-body-mb nan"; do
    out=$(timeout 20 "$bin/foundry" $args 2>&1); status=$?
    opt=$(echo "$args" | grep -o -- '--[a-z-]*[=]\?[ ]*[^ ]*$' | sed 's/[= ].*//')
    { [ $status -eq 1 ] && echo "$out" | grep -q -- "$opt"; } || { echo "FAIL: foundry $args -> status $status: $out"; fail=1; }
  done
fi
[ -x "$bin/bench_infer" ] && check bench_infer 1 --model /nonexistent/model
[ -x "$bin/bench_infer" ] && check bench_infer 1 --model
[ -x "$bin/bench_finetune" ] && check bench_finetune 1 --model /nonexistent/model
[ -x "$bin/bench_train_step" ] && check bench_train_step 1 --threads abc
[ -x "$bin/bench_ops_vs_torch" ] && check bench_ops_vs_torch 1 --bogus
[ -x "$bin/bench_optim_vs_torch" ] && check bench_optim_vs_torch 1 --reps
[ -x "$bin/bench_track_log" ] && check bench_track_log 1 --calls abc
[ -x "$bin/tokenize_bench" ] && check tokenize_bench 1 gpt2=/nonexistent/tokenizer.json -- /nonexistent/corpus.txt
[ -x "$bin/bench_prefill_loop" ] && check bench_prefill_loop 1 /nonexistent/model q4_0 1 8 2
[ -x "$bin/bench_prefill_loop" ] && check bench_prefill_loop 1
# --dir is where bench_track_log makes a scratch folder of its own: what is there survives (it once
# removed the folder named, whole).
if [ -x "$bin/bench_track_log" ]; then
  keep=$(mktemp -d); echo kept > "$keep/mine.txt"
  timeout 60 "$bin/bench_track_log" --calls 10 --reps 1 --dir "$keep" >/dev/null 2>&1 ||
    { echo "FAIL: bench_track_log --dir $keep -> status $?"; fail=1; }
  [ "$(cat "$keep/mine.txt" 2>/dev/null)" = kept ] && [ "$(ls "$keep")" = mine.txt ] ||
    { echo "FAIL: bench_track_log --dir removed or left files in $keep: $(ls "$keep")"; fail=1; }
  rm -rf "$keep"
fi
# Values a bench took without a word (an empty table, float16 as float32, no work at all).
[ -x "$bin/bench_finetune" ] && check bench_finetune 1 --precision float16
[ -x "$bin/bench_train_step" ] && check bench_train_step 1 --precision float16
[ -x "$bin/bench_infer" ] && check bench_infer 1 --dtype bogus
[ -x "$bin/bench_ops_vs_torch" ] && check bench_ops_vs_torch 1 --only no_such_case
[ -x "$bin/bench_optim_vs_torch" ] && check bench_optim_vs_torch 1 --only no_such_case
[ -x "$bin/tokenize_bench" ] && check tokenize_bench 1
# A malformed number is named, not reported as the parser's own exception ("stoi").
numcheck() {  # numcheck NAME ARGS...
  local name=$1; shift
  out=$(timeout 60 "$bin/$name" "$@" 2>&1)
  local status=$?
  if [ $status -ne 1 ] || ! echo "$out" | grep -q "takes an integer"; then
    echo "FAIL: $name $* -> status $status: $(echo "$out" | tail -1)"; fail=1
  fi
}
[ -x "$bin/bench_infer" ] && numcheck bench_infer --threads abc
[ -x "$bin/bench_infer" ] && numcheck bench_infer --decode 12x
[ -x "$bin/bench_ops_vs_torch" ] && numcheck bench_ops_vs_torch --threads 0
[ -x "$bin/bench_train_step" ] && numcheck bench_train_step --steps -1
[ -x "$bin/bench_finetune" ] && numcheck bench_finetune --threads two
[ -x "$bin/bench_optim_vs_torch" ] && numcheck bench_optim_vs_torch --reps x
[ -x "$bin/bench_track_log" ] && numcheck bench_track_log --calls 1.5
[ -x "$bin/tokenize_bench" ] && numcheck tokenize_bench --repeat=x
[ -x "$bin/bench_prefill_loop" ] && numcheck bench_prefill_loop /nonexistent/model q4_0 zero 8 2
# The Python programs under bench/ and tools/ (run from the repository root).
root=$(cd "$(dirname "$0")/.." && pwd)
pycheck() {  # pycheck EXPECTED_STATUS SCRIPT ARGS...
  local want=$1 script=$2; shift 2
  out=$(cd "$root" && timeout 120 /usr/bin/python3 "$script" "$@" 2>&1)
  local status=$?
  if [ "$want" = 0 ]; then
    [ $status -eq 0 ] && [ -n "$out" ] || { echo "FAIL: $script $* -> status $status"; fail=1; }
  elif [ $status -ne 1 ] || ! echo "$out" | grep -q "error" || echo "$out" | grep -q "Traceback"; then
    echo "FAIL: $script $* -> status $status (want 1 and a one-line error): $(echo "$out" | tail -2)"; fail=1
  fi
}
for script in $(cd "$root" && ls bench/*/*.py tools/*.py); do
  case "$script" in tools/torch_ref.py|tools/program.py) continue ;; esac  # libraries, not programs
  pycheck 0 "$script" --help
done
pycheck 1 bench/quant_decode/run.py /nonexistent/bench_infer
pycheck 1 bench/decode_profile/run.py /nonexistent/bench_infer
pycheck 1 bench/under_load/run.py /nonexistent/bin
pycheck 1 bench/under_load/torch_main_job.py 1 1 /nonexistent/text.txt
pycheck 1 tools/gen_fixtures.py /nonexistent/samples /nonexistent/out
# The shell and Perl programs under scripts/ and tools/: --help prints a usage text and runs
# nothing (no install, no build), and an argument they do not take is refused before any work,
# with exit status 2 (the shell's status for misuse; tests/fuzz_list_test.sh relies on it).
shcheck() {  # shcheck EXPECTED_STATUS PROGRAM ARGS...
  local want=$1 program=$2; shift 2
  local run=(bash)
  [[ $program == *.pl ]] && run=(perl)
  out=$(cd "$root" && timeout 60 "${run[@]}" "$program" "$@" 2>&1)
  local status=$?
  if [ "$want" = 0 ]; then
    if [ $status -ne 0 ] || ! echo "$out" | grep -qi "usage"; then
      echo "FAIL: $program $* -> status $status, no usage: $(echo "$out" | tail -2)"; fail=1
    fi
  elif [ $status -ne 2 ] || ! echo "$out" | grep -q "error"; then
    echo "FAIL: $program $* -> status $status (want 2 and an error message): $(echo "$out" | tail -2)"; fail=1
  fi
}
for program in $(cd "$root" && ls scripts/*.sh tools/*.sh tools/*.pl); do
  shcheck 0 "$program" --help
done
for program in scripts/test.sh scripts/sanitize.sh scripts/install-deps.sh scripts/clone-alone.sh tools/gen_fixtures.sh; do
  shcheck 2 "$program" --no-such-option
done
shcheck 2 scripts/fuzz.sh no_such_target
shcheck 2 tools/gen_unicode8_table.pl /nonexistent.txt
[ $fail -eq 0 ] && echo "PASS"
exit $fail
