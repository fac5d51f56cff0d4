// Importer for the AgentCgroup characterisation data (arXiv 2602.09345; one JSON-lines file per
// agent run, the format in README.md, "Importing AgentCgroup data") into `sandgate trace v1`.
//
// Source lines, each file sorted by time:
//   {"t_ms":1039,"mem_bytes":185900000,"cpu_pct":63.24,"cpu_pct_interval_est":63.24,"mem_pct":0.14}
//   {"tool_call":{"name":"Bash","cmd":"python -m pytest tests/ -x","start_ms":53310,
//                 "end_ms":58120,"sidechain":false}}
// What the import does with them:
// - cpu_millicores = cpu_pct_interval_est x 10 (100 % = one core = 1000 millicores), rounded.
//   `cpu_pct` is podman's average since the container started, not the interval's use, so it
//   is not used. The estimate is null on the first sample and sometimes slightly negative (a
//   reconstruction artefact); both become 0 and are counted in the header's notes.
// - pids and io_bytes were not measured: written as 0 and listed in the header's "unmeasured".
// - Intent: Bash commands go through the controller's own inference (controller::choose_intent
//   on argv {"bash", "-c", cmd}, what `sandgate exec` does without --intent; a command no rule
//   knows is `run`, by the rule for `bash -c`; HTML escapes in the data such as "&amp;" are
//   undone first); Read, Grep, Glob
//   are search; Edit, Write, MultiEdit, NotebookEdit are edit; anything else (TodoWrite, Task,
//   WebFetch, WebSearch, BashOutput, ...) is default.
// - Calls get ids c1, c2, ... in file order; sidechain calls (made by a sub-agent inside its
//   Task call) are kept, marked `nested`. A sample names the most recently started call
//   running at its time.
// Every error names the file and line (and field).
#pragma once

#include <string>
#include <string_view>

#include "controller/policy.h"
#include "core/result.h"
#include "replay/trace.h"

namespace sandgate::replay {

// The host the AgentCgroup runs were recorded on (their README): written into the header.
Json agentcgroup_host();

// The data set a run file belongs to: the name of the directory holding it (the data keeps one
// directory per model and experiment: haiku/, all_images_haiku/, ...), "unknown" for none. The
// header's source says "agentcgroup import: DATASET/FILE".
std::string agentcgroup_dataset(const std::string& path);

// The intent of one AgentCgroup tool call under `policy` (its inference rules for Bash).
std::string agentcgroup_intent(const controller::Policy& policy, const std::string& tool,
                               const std::string& cmd);

Result<Trace> parse_agentcgroup(std::string_view text, const std::string& source_name,
                                const controller::Policy& policy = controller::default_policy());
Result<Trace> import_agentcgroup(const std::string& path,
                                 const controller::Policy& policy = controller::default_policy());

}  // namespace sandgate::replay
