#!/usr/bin/env bash
# A fresh machine's `make test`, timed, without deleting any cache another checkout uses: a fresh clone
# of this checkout's HEAD, with the Go build cache, the Go module cache, the end-to-end binaries and the
# pip cache all in new, empty directories under ROOT, and ../shared beside the clone as CI has it.
# Debian packages are not removed (other sessions run against them); `make system-packages` finds them.
#
# Usage: bench/cold_make_test.sh [ROOT]      (default /tmp/cold-make-test; must not exist yet)
# Prints each step's `[step] NAME: N s` line as it ends, and the whole run's wall, user and system time;
# the full log is ROOT/make-test.log.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="${1:-/tmp/cold-make-test}"
if [[ -e "$root" ]]; then
    echo "ERROR: $root exists; a cold run starts from nothing (remove it or name another)" >&2
    exit 1
fi
mkdir -p "$root"
git clone --quiet --no-hardlinks "$here" "$root/otel-blame"
git -C "$root/otel-blame" checkout --quiet "$(git -C "$here" rev-parse HEAD)"
if [[ -d "$here/../shared" ]]; then
    ln -s "$(cd "$here/../shared" && pwd)" "$root/shared"
fi
export GOCACHE="$root/gocache" GOMODCACHE="$root/gomod" OTEL_BLAME_E2E_CACHE="$root/e2e" \
    PIP_CACHE_DIR="$root/pip"
echo "cold make test: $(git -C "$root/otel-blame" log --oneline -1); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
status=0
(cd "$root/otel-blame" && /usr/bin/time -f "wall %e s, user %U s, system %S s, peak %M KiB" bash .ci/run) \
    >"$root/make-test.log" 2>&1 || status=$?
grep -E '^\[step\]' "$root/make-test.log" || true
grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$root/make-test.log" || true
tail -1 "$root/make-test.log"
echo "cold make test: exit $status after $(( $(date +%s) - start )) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
