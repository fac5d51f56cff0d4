# The two commands a newcomer types:
#   make qualify   install what is missing, build, run the main job, write the report
#   make test      install what is missing, build (ASan/UBSan), run the whole test suite
# and the rest:
#   make bench     release build, then the Google Benchmark suites (A/B figures)
#   make format    clang-format every C/C++ source in place
#   make fuzz      clang build of the libFuzzer harnesses (tests/fuzz), then each one run for
#                  FUZZ_SECONDS (default 60) in turn; prints executions, exec/s, coverage and
#                  corpus size per harness, and the reproducer of any crash. The long lane is
#                  the same target with a bigger budget, e.g. overnight:
#                    make fuzz FUZZ_SECONDS=3600              (an hour per harness)
#                    make fuzz FUZZ_SECONDS=14400 FUZZ_ONLY="trace report"
#                  New inputs collect in build/fuzz/corpus/<harness> across runs; crashes in
#                  build/fuzz/crashes/<harness>. `make test` runs every checked-in corpus and
#                  crash input through the same harnesses without libFuzzer, then mutates them
#                  for 5 s per harness (ctest -R fuzz_; the seed is printed).
#   make chaos     dev build (it has the kill points), then CHAOS_ITERATIONS (default 100)
#                  iterations of kill -9 (sandgate at a named step or a random moment, a run's
#                  supervisor, a call) + `sandgate gc` + a look for leftovers; prints the seed,
#                  each kill and the figures. Replay one: make chaos CHAOS_SEED=S CHAOS_ONLY=I
#   make guest-e2e dev build, then the long lane left out of `make test`: the session-level
#                  tests (jail with the controller, probes' lab, Podman) in a QEMU guest on
#                  pure cgroup v2 (4 to 5 minutes under TCG; ctest --preset lanes)
#   make load      release build, then 50 runs replaying traces through one `sandgate serve`
#                  until 10,000 calls (LOAD_RUNS, LOAD_CALLS): calls lost, the monitor's sampling
#                  lag p50/p99, the server's RSS and descriptors as slopes per 1000 calls

SHELL := /bin/bash
RELEASE := build/release
REPORT_DIR ?= reports/out
FUZZ_SECONDS ?= 60
FUZZ_ONLY ?=
CHAOS_ITERATIONS ?= 100
CHAOS_SEED ?=
CHAOS_ONLY ?=
LOAD_RUNS ?= 50
LOAD_CALLS ?= 10000

.PHONY: qualify test bench format bootstrap release dev fuzz chaos load guest-e2e

# `release` builds what qualify needs (sandgate and sandgate-supervisor); `bench` adds the
# benchmark binaries.

bootstrap:
	@ci/bootstrap

release: bootstrap
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target sandgate

dev: bootstrap
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev

qualify: release
	@mkdir -p $(REPORT_DIR)
	@# Exit 1 is a verdict (a provider is not qualified: the table and reports say which and
	@# why), not a failure of the job; 2 is sandgate itself failing.
	@$(RELEASE)/cli/sandgate --providers-config examples/providers/providers.json qualify --out $(REPORT_DIR); \
	  rc=$$?; if [ $$rc -eq 1 ]; then echo "make qualify: reports written; not every provider qualified (see above)"; \
	  elif [ $$rc -ne 0 ]; then exit $$rc; fi

test: bootstrap
	@cmake --workflow --preset dev

bench: release
	@cmake --build --preset release --target jail_bench controller_bench load_bench report_bench podman_bench recipe_bench ebpf_bench microvm_bench serve_bench
	@for b in $(RELEASE)/bench/*_bench; do echo "== $$b"; $$b --benchmark_counters_tabular=true || exit 1; done

format:
	@git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

guest-e2e: dev
	@ctest --preset lanes

fuzz: bootstrap
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run-fuzzers build/fuzz $(FUZZ_ONLY)

chaos: bootstrap
	@cmake --preset dev >/dev/null
	@cmake --build --preset dev --target sandgate sandgate-supervisor sandgate-probe sandgate-load
	@python3 tests/chaos.py --sandgate build/dev/cli/sandgate --iterations $(CHAOS_ITERATIONS) \
	  $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(if $(CHAOS_ONLY),--iteration $(CHAOS_ONLY))

load: release
	@cmake --build --preset release --target load_bench
	@SANDGATE_LOAD_RUNS=$(LOAD_RUNS) SANDGATE_LOAD_CALLS=$(LOAD_CALLS) \
	  $(RELEASE)/bench/load_bench --benchmark_filter=BM_Serve --benchmark_counters_tabular=true
