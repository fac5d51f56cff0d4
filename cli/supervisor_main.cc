// sandgate-supervisor: nothing but the per-run supervisor (providers/supervisor.h), so that
// starting one costs as little as possible. sandgate names it in ProviderOptions.
#include "providers/supervisor.h"

int main(int argc, char** argv) {
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv)) return *rc;
  return 2;  // only ever started by a provider, with the supervisor's arguments
}
