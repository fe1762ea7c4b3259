#!/usr/bin/env bash
# Builds the real third-party programs the end-to-end tests run: an OpenTelemetry Collector made
# with the Collector Builder (ocb), Jaeger v2 and Grafana Tempo. All are pinned below and cached outside the clone
# under $OTEL_BLAME_E2E_CACHE (default ~/.cache/otel-blame-e2e); a binary is rebuilt only when its
# pins (or the builder manifest) change. Modules come from the Go module proxy.
#
# A cold build (empty Go build cache) took 17 minutes on 2 busy cores with -p 1; later runs are
# no-ops until a pin changes. Tempo alone, cold (its modules not yet downloaded, the Collector's
# build cache warm): 30.5 minutes (1827 s) with -p 1 on the same 2 cores under a load average of
# 10-12 from other jobs (2026-11-23, `go build -p 1 -trimpath ./cmd/tempo` in the module dir).
#
# Two builds run at once: the Collector then Jaeger (Jaeger embeds the same Collector modules, so it
# reuses most of the Collector's compiled packages from the Go build cache), and Tempo beside them (its
# module set is another one). One build's module downloads and links overlap the other's compiling;
# binaries are linked without DWARF debug information (-s -w, as the Collector Builder does by
# default), which the tests never read.
#
# Usage: deploy/build_components.sh        (prints the three binary paths when done)
# Env:   OTEL_BLAME_E2E_CACHE  cache root;  E2E_GO_PARALLEL  `go build -p` (default: the number of
#        cores; set 1 to keep a busy machine usable while it builds).
set -euo pipefail

# --- pins -----------------------------------------------------------------------------------------
# Collector core modules (v0.x line) and contrib modules. Chosen to match the Collector that the
# pinned Jaeger embeds, so both builds share one module set.
BUILDER_VERSION=v0.140.0
CORE_VERSION=v0.140.0
CONTRIB_VERSION=v0.140.1
# Jaeger v2 (`cmd/jaeger`). The module path has no /v2 suffix, so v2.x tags cannot be installed; the
# repository also tags every release commit with a v1.x module version, which is what is pinned
# here (the Go module proxy serves tagged versions; it refuses bare commit hashes).
JAEGER_MODULE_VERSION=v1.76.0
# Grafana Tempo (`cmd/tempo`). Its module path has no /v2 suffix either, so no v2.x release tag is a
# valid module version, and Tempo has no v1.x twin tags after v1.5.0 (2022, no TraceQL). The proxy
# does serve this pseudo-version (commit 87c2dc380cec on main, 2025-05-29: after the v2.8 branch cut,
# before v2.9.0-rc.0; it is the version other projects' go.mod files require). The checksum database
# has no entry for it, so its hash is pinned here and checked after the download.
TEMPO_MODULE_VERSION=v1.5.1-0.20250529124718-87c2dc380cec
TEMPO_MODULE_SUM=h1:wnzJov9RhSHGaTYGzTygL4qq986fLen8xSqnQgaMd28=
# ---------------------------------------------------------------------------------------------------

here="$(cd "$(dirname "$0")" && pwd)"
manifest_template="$here/components/otelcol-builder.yaml"
cache="${OTEL_BLAME_E2E_CACHE:-$HOME/.cache/otel-blame-e2e}"
bin="$cache/bin"
parallel="${E2E_GO_PARALLEL:-$(nproc 2>/dev/null || echo 1)}"

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="$PATH:/usr/local/go/bin"  # Go's default install location, when PATH lacks it
fi
if ! command -v go >/dev/null 2>&1; then
    echo "ERROR: Go is not installed (or not on PATH); it is needed to build the end-to-end" >&2
    echo "       components (OpenTelemetry Collector, Jaeger). Install Go 1.24+ and retry." >&2
    exit 1
fi
mkdir -p "$bin" "$cache/tools" "$cache/work"

log() { echo "[build_components] $*" >&2; }

# A pin file next to each binary records what it was built from; equal pins mean nothing to do.
up_to_date() {  # $1 binary, $2 expected pin text
    [[ -x "$1" && -f "$1.pin" && "$(cat "$1.pin")" == "$2" ]]
}

build_collector() {
    local target="$bin/otelcol-blame"
    local pin
    pin="builder=$BUILDER_VERSION core=$CORE_VERSION contrib=$CONTRIB_VERSION go=$(go env GOVERSION)
manifest=$(sha256sum "$manifest_template" | cut -d' ' -f1)"
    if up_to_date "$target" "$pin"; then
        log "otelcol-blame is up to date"
        return
    fi
    local builder="$cache/tools/builder-$BUILDER_VERSION"
    if [[ ! -x "$builder" ]]; then
        log "installing the Collector Builder $BUILDER_VERSION"
        local gobin="$cache/work/builder-bin"
        rm -rf "$gobin" && mkdir -p "$gobin"
        # The checksum database has no entry for the builder module itself; the proxy serves it over TLS.
        (cd "$cache/work" && GOBIN="$gobin" GONOSUMDB=go.opentelemetry.io/collector/cmd/builder \
            go install -p "$parallel" "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION")
        mv "$gobin/builder" "$builder"
    fi
    local out="$cache/work/otelcol-blame"
    rm -rf "$out" && mkdir -p "$out"
    sed -e "s|@CORE@|$CORE_VERSION|g" -e "s|@CONTRIB@|$CONTRIB_VERSION|g" -e "s|@OUTPUT@|$out|g" \
        "$manifest_template" >"$cache/work/otelcol-builder.yaml"
    # The checksum database lacks many Collector modules, so module hashes are pinned by the go.sum
    # kept next to the manifest instead (seeded into the generated module before `go mod tidy`).
    cp "$here/components/otelcol-blame.go.sum" "$out/go.sum"
    log "building otelcol-blame (core $CORE_VERSION, contrib $CONTRIB_VERSION); this takes a while"
    GOSUMDB=off GOFLAGS="-p=$parallel -buildvcs=false" "$builder" --config "$cache/work/otelcol-builder.yaml"
    if ! cmp -s "$out/go.sum" "$here/components/otelcol-blame.go.sum"; then
        log "note: the build added module hashes missing from deploy/components/otelcol-blame.go.sum;"
        log "      refresh it with: cp $out/go.sum $here/components/otelcol-blame.go.sum"
    fi
    install -m 0755 "$out/otelcol-blame" "$target.tmp"
    mv "$target.tmp" "$target"
    printf '%s' "$pin" >"$target.pin"
}

build_jaeger() {
    local target="$bin/jaeger"
    local pin="jaeger=$JAEGER_MODULE_VERSION go=$(go env GOVERSION)"
    if up_to_date "$target" "$pin"; then
        log "jaeger is up to date"
        return
    fi
    # `go install pkg@version` refuses modules whose go.mod has replace directives (Jaeger's has
    # one), so build inside the downloaded module instead; its go.sum pins every dependency.
    log "downloading Jaeger $JAEGER_MODULE_VERSION"
    local src
    src="$(cd "$cache/work" && go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    if [[ -z "$src" || ! -f "$src/go.mod" ]]; then
        log "ERROR: could not download github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION"
        exit 1
    fi
    log "building jaeger from $src; this takes a while"
    (cd "$src" && GOFLAGS="-buildvcs=false" go build -p "$parallel" -trimpath -ldflags="-s -w" -o "$target.tmp" ./cmd/jaeger)
    mv "$target.tmp" "$target"
    printf '%s' "$pin" >"$target.pin"
}

build_tempo() {
    local target="$bin/tempo"
    local pin="tempo=$TEMPO_MODULE_VERSION go=$(go env GOVERSION)"
    if up_to_date "$target" "$pin"; then
        log "tempo is up to date"
        return
    fi
    log "downloading Grafana Tempo $TEMPO_MODULE_VERSION"
    local info src sum
    info="$(cd "$cache/work" && GONOSUMDB=github.com/grafana/tempo \
        go mod download -json "github.com/grafana/tempo@$TEMPO_MODULE_VERSION")"
    src="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")"
    sum="$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p' <<<"$info")"
    if [[ -z "$src" || ! -f "$src/go.mod" ]]; then
        log "ERROR: could not download github.com/grafana/tempo@$TEMPO_MODULE_VERSION"
        exit 1
    fi
    if [[ "$sum" != "$TEMPO_MODULE_SUM" ]]; then
        log "ERROR: github.com/grafana/tempo@$TEMPO_MODULE_VERSION has hash $sum, pinned $TEMPO_MODULE_SUM"
        exit 1
    fi
    # A module zip carries no vendor/ directory, so dependencies come from the proxy (-mod=mod),
    # each checked against Tempo's own go.sum.
    log "building tempo from $src; this takes a while"
    (cd "$src" && GOFLAGS="-buildvcs=false -mod=mod" go build -p "$parallel" -trimpath -ldflags="-s -w" -o "$target.tmp" ./cmd/tempo)
    mv "$target.tmp" "$target"
    printf '%s' "$pin" >"$target.pin"
}

# Each lane's log lines carry its name, and say how long each build took; the script fails when either
# lane failed.
lane() {  # $1 name, then the functions to run in order
    local name="$1"
    shift
    (
        set -euo pipefail
        for step in "$@"; do
            started=$(date +%s)
            "$step"
            log "$step: $(( $(date +%s) - started )) s"
        done
    ) > >(sed -u "s/^/[$name] /") 2>&1
}
lane collector+jaeger build_collector build_jaeger &
collector_lane=$!
lane tempo build_tempo &
tempo_lane=$!
status=0
wait "$collector_lane" || status=1
wait "$tempo_lane" || status=1
if [[ $status -ne 0 ]]; then
    log "ERROR: a build failed (see the lines above)"
    exit 1
fi
echo "$bin/otelcol-blame"
echo "$bin/jaeger"
echo "$bin/tempo"
