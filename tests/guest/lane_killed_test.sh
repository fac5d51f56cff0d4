#!/bin/bash
# A guest lane killed outright (SIGKILL, as ctest's timeout or a stopped session does) leaves
# nothing: its qemu dies with it (parent-death signal), and the next lane removes its work
# directory once its owner is gone. Usage: lane_killed_test.sh RUN_LANE SANDGATE GUEST_BINARY
# Exit 77: the lane cannot run here (no qemu or guest kernel), a failure under SANDGATE_MUST_WORK=1.
set -u
lane=$1 sandgate=$2 binary=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sgtest-lane-kill.XXXXXX")
first=""; second=""; qemu=""
finish() {
  for p in $first $second $qemu; do kill -9 "$p" 2>/dev/null; done  # recorded pids only
  rm -rf "$tmp"
}
trap finish EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

TMPDIR=$tmp "$lane" --sandgate "$sandgate" --out "$tmp/out" "$binary" >"$tmp/first.log" 2>&1 &
first=$!
qemu=""
for _ in $(seq 1 300); do
  qemu=$(pgrep -P "$first" -f qemu-system || true)
  [ -n "$qemu" ] && break
  kill -0 "$first" 2>/dev/null || break
  sleep 1
done
if [ -z "$qemu" ]; then
  wait "$first"; rc=$?
  [ "$rc" = 77 ] && { cat "$tmp/first.log"; exit 77; }
  cat "$tmp/first.log"; fail "the lane started no qemu (exit $rc)"
fi
kill -9 "$first"
for _ in $(seq 1 50); do
  st=$(awk '{print $3}' "/proc/$qemu/stat" 2>/dev/null || true)
  [ -z "$st" ] || [ "$st" = Z ] && break
  sleep 0.1
done
st=$(awk '{print $3}' "/proc/$qemu/stat" 2>/dev/null || true)
[ -z "$st" ] || [ "$st" = Z ] || fail "qemu $qemu outlived its killed lane (state $st)"
stale=$(ls -d "$tmp"/sandgate-lane.* 2>/dev/null)
[ -n "$stale" ] || fail "the killed lane had no work directory to leave"

# The next lane removes the dead one's directory as it starts.
TMPDIR=$tmp "$lane" --sandgate "$sandgate" --out "$tmp/out" "$binary" >"$tmp/second.log" 2>&1 &
second=$!
for _ in $(seq 1 100); do
  [ -d "$stale" ] || break
  sleep 0.1
done
[ -d "$stale" ] && fail "the next lane left the killed lane's $stale"
kill -TERM "$second"; wait "$second" 2>/dev/null
left=$(ls -d "$tmp"/sandgate-lane.* 2>/dev/null)
[ -z "$left" ] || fail "a terminated lane left $left"
echo "ok: qemu died with its lane; the next lane removed the stale work directory"
