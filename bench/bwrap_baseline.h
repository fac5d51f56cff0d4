// The bubblewrap baseline of a run: /bin/true in a bubblewrap sandbox. One definition shared by
// jail_bench (BM_Bwrap) and `sandgate bench` (run.namespaces_vs_bwrap), so both hold the
// namespaces provider to the same baseline. Header-only: the CLI does not link the benchmarks.
#pragma once

#include <string>
#include <vector>

namespace sandgate::bench {

// The bubblewrap baseline, exactly as the issue states it: a read-only /usr, the merged-/usr
// symlinks, fresh /proc, /dev and /tmp, every namespace unshared.
// clang-format off
inline const std::vector<std::string> kBwrapBaselineArgv = {
    "bwrap",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin",
    "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64",
    "--proc", "/proc",
    "--dev", "/dev",
    "--tmpfs", "/tmp",
    "--unshare-all",
    "--die-with-parent",
    "/bin/true"};
// clang-format on

}  // namespace sandgate::bench
