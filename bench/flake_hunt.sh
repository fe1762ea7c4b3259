#!/usr/bin/env bash
# The flake hunt (issue 35): run a set of tests again and again while busy-loop processes hold every
# core, and say how each run ended. A test that fails here and passes alone waited on time it was not
# given: fix the wait at its cause (ready signals, bounded polls on the real condition), not the timeout.
#
# Usage: bench/flake_hunt.sh RUNS [pytest arguments...]   (default: tests/e2e tests/processor)
# Env:   FLAKE_BURNERS   busy-loop processes at nice 0 (default: the number of cores)
#        FLAKE_LOG_DIR   where each run's output goes (default: a fresh directory under /tmp)
#        PYTHON          the interpreter with the test dependencies (default: .venv/bin/python)
# Prints one line per run (exit status, the pytest summary line, the load average) and the failures.
set -uo pipefail
cd "$(dirname "$0")/.."

runs="${1:?usage: bench/flake_hunt.sh RUNS [pytest arguments...]}"
shift
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(tests/e2e tests/processor)
python="${PYTHON:-.venv/bin/python}"
burners="${FLAKE_BURNERS:-$(nproc)}"
log_dir="${FLAKE_LOG_DIR:-$(mktemp -d /tmp/flake-hunt.XXXXXX)}"
mkdir -p "$log_dir"

pids=()
stop_burners() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait "${pids[@]}" 2>/dev/null
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
    nice -n 0 "$python" -c 'while 1: pass' &
    pids+=("$!")
done

echo "flake hunt: $runs runs of ${targets[*]}, $burners busy-loop processes at nice 0, logs in $log_dir"
failed_runs=0
for run in $(seq "$runs"); do
    start=$(date +%s)
    "$python" -m pytest -q -p no:cacheprovider -rfE "${targets[@]}" >"$log_dir/run-$run.log" 2>&1
    status=$?
    summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$log_dir/run-$run.log" | tail -1)"
    echo "run $run: exit $status in $(( $(date +%s) - start )) s; ${summary:-no summary}; load $(cut -d' ' -f1-3 /proc/loadavg)"
    if [[ $status -ne 0 ]]; then
        failed_runs=$((failed_runs + 1))
        grep -E '^(FAILED|ERROR) ' "$log_dir/run-$run.log" | sed 's/^/    /'
    fi
done
echo "flake hunt: $failed_runs of $runs runs failed"
[[ $failed_runs -eq 0 ]]
