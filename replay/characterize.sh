#!/bin/sh
# Characterise the valid AgentCgroup runs the way the paper does, and ask the planner about
# the paper's host. The data is read where it lies and imported to a temporary directory; none
# of it is written into the tree.
#
#   replay/characterize.sh [SANDGATE] [AGENTCGROUP_DIR] [OUT_DIR]
#
# SANDGATE defaults to build/dev/cli/sandgate; AGENTCGROUP_DIR to $SANDGATE_AGENTCGROUP_TRACES,
# else ../shared/traces/agentcgroup beside the tree (where this project's machines keep it; the
# data is not in the repository, README "Importing AgentCgroup data"). OUT_DIR (default: a
# fresh mktemp -d)
# receives the imported traces, stats.json and plan-*.json.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
sandgate=${1:-$here/build/dev/cli/sandgate}
data=${2:-${SANDGATE_AGENTCGROUP_TRACES:-$here/../shared/traces/agentcgroup}}
out=${3:-$(mktemp -d /tmp/sandgate-agentcgroup.XXXXXX)}

# The paper's validity filter: at least 10 samples and 60 s (index.jsonl).
files=$(grep '"valid_ge10samples_ge60s":true' "$data/index.jsonl" |
        sed 's/.*"file":"\([^"]*\)".*/\1/' | sed "s|^|$data/|")
echo "$(echo "$files" | wc -l) valid runs -> $out/traces"
# shellcheck disable=SC2086  # one path per word: the data's names have no spaces
"$sandgate" trace import --from agentcgroup $files --out "$out/traces" >/dev/null
"$sandgate" trace validate "$out/traces" >/dev/null

"$sandgate" trace stats "$out/traces" | tail -n +35
"$sandgate" trace stats --json "$out/traces" > "$out/stats.json"

# The paper's host: 24 cores, 128 GB, with the built-in policy and with grants sized on these
# runs (agentcgroup_sized_policy.json). Then the issue's example host.
"$sandgate" plan --traces "$out/traces" --host-memory 128GB --host-cpus 24 --seed 1 \
  --json "$out/plan-128GB-24cpu.json"
"$sandgate" plan --traces "$out/traces" --host-memory 128GB --host-cpus 24 --seed 1 \
  --policy "$here/replay/agentcgroup_sized_policy.json" --json "$out/plan-128GB-24cpu-sized.json"
"$sandgate" plan --traces "$out/traces" --host-memory 64GiB --host-cpus 16 --seed 1 \
  --json "$out/plan-64GiB-16cpu.json"
echo "figures in $out"
