#!/bin/bash
# The third quiet run (redis 7.0 steady), after the receive fix: ABBA x6 of 256 KiB x 32 GET and
# SET; 4 MiB x 32 GET x3; fewer workers (2 x 4 connections) against 8 x 1 for SET and 8-key
# EXISTS; system calls and switches per batch of 256 KiB x 32 GET.
cd "$(dirname "$0")"
./abba.sh redis steady get 32 262144 300 6
./abba.sh redis steady set 32 262144 300 6
./abba.sh redis steady get 32 4194304 30 3
./workers.sh redis set 32 262144 300 5
./workers.sh redis exists 8 4096 2000 5
./syscalls.sh redis get 32 262144
