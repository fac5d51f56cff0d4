# The two commands a newcomer types:
#   make qualify   install what is missing, build, run the main job, write the report
#   make test      install what is missing, build (ASan/UBSan), run the whole test suite
# and the rest:
#   make bench     release build, then the Google Benchmark suites (A/B figures)
#   make format    clang-format every C/C++ source in place

SHELL := /bin/bash
RELEASE := build/release
REPORT_DIR ?= reports/out

.PHONY: qualify test bench format bootstrap release dev

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
	@cmake --build --preset release --target jail_bench controller_bench load_bench report_bench podman_bench recipe_bench ebpf_bench
	@for b in $(RELEASE)/bench/*_bench; do echo "== $$b"; $$b --benchmark_counters_tabular=true || exit 1; done

format:
	@git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i
