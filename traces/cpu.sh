#!/bin/sh
# Driver for cpu.trace: a short real run that keeps both cores busy, the aggressor the neighbour
# score needs to tell policies apart on a 2-core host (burst.trace's calls use half a core at
# most): a small C program written and compiled with gcc, then run as two workers at once (a
# test runner's `-j2`), then a grep. Sleeps on the host stand in for the model's thinking.
set -e
c="$(dirname "$0")/call.sh"
$c compile sh -c 'printf "#include <stdio.h>\nint main(void){long s=0;for(long i=0;i<1500000000;i++)s+=i%%7;printf(\"%%ld\\\\n\",s);return 0;}\n" > spin.c && gcc -O1 -o spin spin.c'
sleep 1
$c test sh -c './spin & ./spin & wait'
sleep 1
$c search grep -c main spin.c
