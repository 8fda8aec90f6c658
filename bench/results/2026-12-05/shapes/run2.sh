#!/bin/bash
# run1's EXISTS line again with 4 KiB values (run1 passed 0, which batch.py cannot divide by).
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/shapes.sh" redis exists 8 4096 2000 5
"$HERE/shapes.sh" redis exists 32 4096 2000 5
