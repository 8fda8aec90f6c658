#!/bin/bash
# The shapes run of 2026-12-05 (Redis 7.0.15, steady), in order; output: run1-redis-steady.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/shapes.sh" redis set 32 262144 300 5
"$HERE/shapes.sh" redis get 32 262144 300 5
"$HERE/shapes.sh" redis exists 8 4096 2000 5  # run1 had size 0 here: each run failed (cpu/GB divides by the bytes); run2 is this line alone
"$HERE/shapes.sh" redis set 32 4194304 40 5
"$HERE/shapes.sh" redis set 8 33554432 20 5
"$HERE/shapes.sh" redis set 32 262144 300 5 4
