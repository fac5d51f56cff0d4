#!/usr/bin/env bash
# The guest lane's end-to-end run: session-level tests on a pure cgroup v2 kernel.
#
#   lane_e2e.sh BASE_IMAGE_TOOL RUN_LANE [run-lane options and test binaries...]
#
# Asks BASE_IMAGE_TOOL (tests/guest/guest_base_image) for the microVM's cached base image,
# building it if this host's /usr changed, and runs RUN_LANE with it as --base-image. Exit
# status as run-lane's (77: cannot run here).
set -euo pipefail
tool=${1:?base image tool}
lane=${2:?run-lane}
shift 2
if ! image=$(ASAN_OPTIONS=detect_leaks=0 "$tool"); then
  if [ "${SANDGATE_MUST_WORK:-}" = "1" ]; then
    echo "lane_e2e: FAILED: no base image for the guest (see above)" >&2
    exit 1
  fi
  echo "lane_e2e: SKIPPED: no base image for the guest (see above)" >&2
  exit 77
fi
exec "$lane" --base-image "$image" "$@"
