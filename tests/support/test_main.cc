// The main of every test binary: a test binary can be re-executed as a provider's supervisor
// (providers/supervisor.h), exactly like the sandgate binary.
#include <gtest/gtest.h>

#include "core/log.h"
#include "providers/supervisor.h"

int main(int argc, char** argv) {
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  sandgate::init_logging("");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
