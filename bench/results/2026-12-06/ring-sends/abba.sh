#!/usr/bin/env bash
# #42: the io_uring loop's sends now complete with what the socket took (no MSG_WAITALL) and are
# counted sent only then. Does any figure move? ABBA: this checkout's build (NEW) against the
# build before #42 (OLD: a checkout of 606a28a built into its own venv), on the same throwaway
# Redis 7.0 per run, each cell on both builds in turn.
#
#   OLD=<python of the pre-#42 build> bench/results/2026-12-06/ring-sends/abba.sh [ROUNDS] > out.txt
#
# Cells: 4 MiB x 200 and 256 KiB x 1000 on the io_uring loop (what changed), 4 MiB x 200 on the
# poll loop (a control: its send path did not change). Each line: cell, build, set, get GB/s,
# SET CPU s/GB, GET CPU s/GB.
set -euo pipefail
REPO=${REPO:-$(cd "$(dirname "$0")/../../../.." && pwd)}
NEW=${NEW:-$REPO/.venv/bin/python}
: "${OLD:?set OLD to the python of a build of 606a28a (git worktree add <dir> 606a28a; maturin develop --release there)}"
ROUNDS=${1:-4}
cells=("uring 4 200" "uring 0.25 1000" "poll 4 200")
# One cell on one build: its JSON report kept beside the summary line.
run() {
    local py=$1 loop=$2 mb=$3 keys=$4 json=$5
    # From a folder of no checkout: `python -m` puts the working directory first on the path, and
    # each build must import its own package.
    (cd "$NEUTRAL" && LMCACHE_RESP_IO_BACKEND=$loop "$py" -m lmcache_resp.bench --chunk-mb "$mb" --num-keys "$keys" --rounds 3 --json \
        >"$json" 2>/dev/null)
    python3 "$(dirname "$0")/summarize.py" "$json"
}
OUT=${OUT:-$(mktemp -d)}
NEUTRAL=$(mktemp -d)
echo "# raw JSON reports in $OUT" >&2
for round in $(seq 1 "$ROUNDS"); do
    for cell in "${cells[@]}"; do
        set -- $cell
        if [ $((round % 2)) = 1 ]; then order="NEW OLD"; else order="OLD NEW"; fi
        for build in $order; do
            py=$NEW; [ "$build" = OLD ] && py=$OLD
            echo "$1-$2MiBx$3 $build $(run "$py" "$1" "$2" "$3" "$OUT/$1-$2MiBx$3-$build-$round.json")"
        done
    done
done
