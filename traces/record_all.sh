#!/bin/sh
# Re-records the traces in this folder (README.md says what each is). Run as root from anywhere:
#   SANDGATE=path/to/sandgate TEST_BUILD=path/to/build traces/record_all.sh [search_edit|build|tests]...
# SANDGATE: the sandgate binary (sandgate-supervisor beside it); TEST_BUILD: a build tree whose
# unit-test binaries tests.sh runs (core/core_test, controller/policy_test, ...).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
sandgate=${SANDGATE:-$root/build/release/cli/sandgate}
test_build=${TEST_BUILD:-$root/build/dev}
which=${*:-search_edit build tests burst cpu}
# The workspace: a copy of this repository (sources and .git, no build trees).
src=$(mktemp -d /var/tmp/sandgate-trace-src-XXXXXX)
trap 'rm -rf "$src"' EXIT
(cd "$root" && tar --exclude=./build -cf - .) | (cd "$src" && tar -xf -)
for t in $which; do
  case $t in
    search_edit) "$sandgate" record --out "$here/search_edit.trace" --interval 50ms --workspace "$src" \
                   --notes "search/edit session on a copy of sandgate (traces/search_edit.sh)" -- "$here/search_edit.sh" ;;
    build) "$sandgate" record --out "$here/build.trace" --interval 100ms --workspace "$src" \
             --notes "C++ build of sandgate_core from a copy of the source (traces/build.sh)" -- "$here/build.sh" ;;
    tests) "$sandgate" record --out "$here/tests.trace" --interval 100ms --workspace "$src" \
             --ro-bind "$test_build:/opt/build" --env SANDGATE_SOURCE_DIR=/workspace \
             --notes "sandgate unit-test suites (traces/tests.sh)" -- "$here/tests.sh" ;;
    burst) "$sandgate" record --out "$here/burst.trace" --interval 50ms \
             --notes "short real burst-silence run for the end-to-end replay test (traces/burst.sh)" -- "$here/burst.sh" ;;
    cpu) "$sandgate" record --out "$here/cpu.trace" --interval 50ms \
           --notes "short real run keeping both cores busy, the neighbour score's aggressor (traces/cpu.sh)" -- "$here/cpu.sh" ;;
    *) echo "unknown trace $t" >&2; exit 2 ;;
  esac
done
