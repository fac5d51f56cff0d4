// sandgate-supervisor: nothing but the per-run supervisor (providers/supervisor.h), so that
// starting one costs as little as possible. sandgate names it in ProviderOptions. As a
// microVM's guest agent it also runs the controller's part for each call inside the guest
// (controller/guest_control.h).
#include "controller/guest_control.h"
#include "providers/supervisor.h"

int main(int argc, char** argv) {
  if (auto rc = sandgate::providers::maybe_run_supervisor(argc, argv,
                                                          sandgate::controller::make_guest_calls))
    return *rc;
  return 2;  // only ever started by a provider, with the supervisor's arguments
}
