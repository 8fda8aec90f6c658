#!/bin/bash
# The first quiet run (redis 7.0 steady): ABBA x4 of 256 KiB x 32 SET and GET, 4 MiB x 32 SET
# and GET, 32 MiB x 8 SET, 8- and 32-key EXISTS, at 1 in flight; then system calls and context
# switches per batch (perf stat) for 256 KiB x 32 SET and GET and 8-key EXISTS.
cd "$(dirname "$0")"
./abba.sh redis steady set 32 262144 300 4
./abba.sh redis steady get 32 262144 300 4
./abba.sh redis steady set 32 4194304 30 4
./abba.sh redis steady get 32 4194304 30 4
./abba.sh redis steady set 8 33554432 12 4
./abba.sh redis steady exists 8 4096 2000 4
./abba.sh redis steady exists 32 4096 2000 4
./syscalls.sh redis set 32 262144
./syscalls.sh redis get 32 262144
./syscalls.sh redis exists 8 4096
