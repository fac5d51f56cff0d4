#!/bin/sh
# Driver for tests.trace: a real test-suite run, sandgate's unit-test binaries (built on the
# host beforehand, bound read-only at /opt/build), each as one `test` call in a workspace that
# is a copy of the source (their testdata). Sleeps on the host stand in for thinking time.
c="$(dirname "$0")/call.sh"
$c search sh -c 'ls /opt/build/*/ | head -50'
sleep 2
for t in core/core_test controller/policy_test controller/ladder_test controller/cgroup_test replay/trace_test; do
  $c test /opt/build/$t --gtest_brief=1 || true
  sleep 2
done
