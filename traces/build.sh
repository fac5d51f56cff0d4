#!/bin/sh
# Driver for build.trace: a real C++ build of sandgate's core library from a copy of the
# source (the recorded run's workspace), with the reads an agent makes around it. The sleeps
# run on the host, outside the run: they stand in for the model's thinking between calls.
set -e
c="$(dirname "$0")/call.sh"
$c search sh -c 'ls; cat CMakeLists.txt | head -40'
sleep 3
$c search grep -rn "add_library" --include=CMakeLists.txt .
sleep 2
$c compile cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug -DSANDGATE_BUILD_TESTS=OFF -DSANDGATE_BUILD_BENCH=OFF
sleep 4
$c compile cmake --build build --target sandgate_core -j2
sleep 3
$c search sh -c 'ls -la build/core && du -sh build'
sleep 2
$c edit sed -i 's/^constexpr Bytes KiB/\/\/ replayed edit\nconstexpr Bytes KiB/' core/units.h
sleep 2
$c compile cmake --build build --target sandgate_core -j2
