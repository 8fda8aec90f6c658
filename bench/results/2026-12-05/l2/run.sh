#!/bin/bash
# The runs of 2026-12-05, in order (see README.md); logs matrix-*.log.
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/matrix.sh" redis 256K,256Kx8 1,4 6 10 small > "$HERE/matrix-redis-small.log" 2>&1
"$HERE/matrix.sh" redis 4M,32Mx8 1 4 4 large > "$HERE/matrix-redis-large.log" 2>&1
"$HERE/matrix.sh" valkey9 256K,256Kx8 1 6 10 small > "$HERE/matrix-valkey9-small.log" 2>&1
