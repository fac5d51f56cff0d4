#!/bin/sh
# Driver for burst.trace: a short real run with the burst-silence shape, small enough for the
# end-to-end replay test: a look around, a small C program written and compiled with gcc, a
# Python call that allocates 300 MB for a second (a test run's burst), and a grep.
# Sleeps on the host stand in for the model's thinking between calls.
set -e
c="$(dirname "$0")/call.sh"
$c search sh -c 'ls -la; uname -a'
sleep 1
$c compile sh -c 'printf "#include <stdio.h>\nint main(void){long s=0;for(long i=0;i<100000000;i++)s+=i%%7;printf(\"%%ld\\\\n\",s);return 0;}\n" > sum.c && gcc -O1 -o sum sum.c && ./sum'
sleep 1
$c test python3 -c 'import time; b = bytearray(300 * 1000 * 1000); time.sleep(1.0); print(len(b))'
sleep 1
$c search grep -c main sum.c
