// The cgroup backends against this host's kernel (root; a hybrid or cgroup2 host): the backend
// for the host's layout, and the v1 backend on the host's v1 hierarchies, so the freezer,
// freeze + SIGKILL + thaw and memory.pressure_level paths run for real too. The suite is in
// cgroup_real_suite.h; cgroup_v2_real_test.cc runs it in the pure cgroup2 guest.
#include "controller/cgroup_real_suite.h"

namespace sandgate::controller::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Cgroup, RealCgroupTest, ::testing::Values(Backend::kHost, Backend::kV1),
                         backend_name);

}  // namespace
}  // namespace sandgate::controller::testing
