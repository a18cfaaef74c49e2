# A thin convenience layer over CMake. Each build lives in its own folder
# under build/; every target installs the Debian packages it needs first
# (scripts/deps.sh), so `make demo` and `make test` are the whole set-up on a
# fresh Debian 12 machine.

JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE   ?= cmake
CTEST   ?= ctest
BUILD   ?= build
# Extra CMake arguments for every configuration.
CMAKE_ARGS ?=

CTEST_FLAGS = --output-on-failure --no-tests=error -j $(JOBS)

.PHONY: all deps demo release test test-nofibers test-all test-asan test-tsan test-valgrind test-mpich \
        test-noomp test-clang test-aarch64 check-format format bench plots docs install clean

all: release

deps:
	@scripts/deps.sh base

# configure(dir, cmake args...)
define configure
	@$(CMAKE) -S . -B $(BUILD)/$(1) $(2) $(CMAKE_ARGS) >$(BUILD)/$(1).configure.log 2>&1 || \
	  { cat $(BUILD)/$(1).configure.log; exit 1; }
endef

$(BUILD):
	@mkdir -p $(BUILD)

# --- the README's two commands ----------------------------------------------

release: deps | $(BUILD)
	$(call configure,release,-DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF)
	$(CMAKE) --build $(BUILD)/release -j $(JOBS)

demo: release
	$(BUILD)/release/benchmarks/weft-bench/weft-bench embroidery

# The test build: optimised, warnings as errors, test hooks compiled in.
# It runs the whole suite, then again with fibers switched off (the fallback).
test: deps | $(BUILD)
	$(call configure,test,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON)
	$(CMAKE) --build $(BUILD)/test -j $(JOBS)
	cd $(BUILD)/test && $(CTEST) $(CTEST_FLAGS)
	cd $(BUILD)/test && WEFT_FIBERS=0 $(CTEST) $(CTEST_FLAGS)

# --- the rest of the CI matrix (.ci/run) --------------------------------------

test-all: test test-asan test-tsan test-valgrind test-noomp test-clang test-mpich test-aarch64 check-format

ci-deps:
	@scripts/deps.sh ci

test-asan: ci-deps | $(BUILD)
	$(call configure,asan,-DCMAKE_BUILD_TYPE=Debug -DWEFT_TESTING=ON -DWEFT_WERROR=ON \
	  -DWEFT_SANITIZE=address$(,)undefined -DWEFT_BUILD_BENCHMARKS=OFF)
	$(CMAKE) --build $(BUILD)/asan -j $(JOBS)
	cd $(BUILD)/asan && $(CTEST) $(CTEST_FLAGS)

# ThreadSanitizer with clang and LLVM's libomp, whose OMPT tool "archer" tells
# TSan about OpenMP's synchronisation (libgomp is not built for TSan).
test-tsan: ci-deps | $(BUILD)
	$(call configure,tsan,-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON \
	  -DWEFT_SANITIZE=thread -DWEFT_BUILD_BENCHMARKS=OFF)
	$(CMAKE) --build $(BUILD)/tsan -j $(JOBS)
	cd $(BUILD)/tsan && $(CURDIR)/scripts/tsan-env.sh $(CTEST) $(CTEST_FLAGS)

test-valgrind: ci-deps test
	cd $(BUILD)/test && $(CTEST) --output-on-failure -L core -T memcheck \
	  --overwrite MemoryCheckCommandOptions="--error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --track-origins=no --suppressions=$(CURDIR)/scripts/valgrind.supp" \
	  -j $(JOBS) || { grep -h -B1 -A24 -E 'Invalid (read|write|free)|Syscall param|uninitialised|Mismatched|(definitely|indirectly) lost in' \
	    Testing/Temporary/MemoryChecker.*.log 2>/dev/null | head -400; exit 1; }

test-noomp: deps | $(BUILD)
	$(call configure,noomp,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON \
	  -DWEFT_OPENMP=OFF -DWEFT_BUILD_BENCHMARKS=OFF)
	$(CMAKE) --build $(BUILD)/noomp -j $(JOBS)
	cd $(BUILD)/noomp && $(CTEST) $(CTEST_FLAGS)

test-clang: ci-deps | $(BUILD)
	$(call configure,clang,-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON)
	$(CMAKE) --build $(BUILD)/clang -j $(JOBS)
	cd $(BUILD)/clang && $(CTEST) $(CTEST_FLAGS)

# weft_mpi's suites again with MPICH, installed beside Open MPI (scripts/deps.sh ci); Open MPI
# stays the default MPI, so this build names MPICH's wrappers and launcher.
test-mpich: ci-deps | $(BUILD)
	$(call configure,mpich,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON \
	  -DWEFT_BUILD_BENCHMARKS=OFF -DMPI_C_COMPILER=mpicc.mpich -DMPI_Fortran_COMPILER=mpif90.mpich \
	  -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich)
	$(CMAKE) --build $(BUILD)/mpich -j $(JOBS)
	cd $(BUILD)/mpich && $(CTEST) $(CTEST_FLAGS) -L 'mpi|fortran'

# The soak (docs/reliability.md), in the test build: seeded random public calls with 1% of the calls at
# every fault site failing. make soak [MINUTES=3 | SECONDS=N] [SEED=S] [FAULT_RATE=PPM] [SOAK_SKIP=...];
.PHONY: soak
MINUTES ?= 3
SOAK_SKIP ?=
soak: deps | $(BUILD)
	$(call configure,test,-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON)
	$(CMAKE) --build $(BUILD)/test -j $(JOBS) --target test_soak
	$(BUILD)/test/tests/test_soak $(if $(SECONDS),--seconds $(SECONDS),--minutes $(MINUTES)) \
	  $(if $(SEED),--seed $(SEED)) $(if $(FAULT_RATE),--fault-rate $(FAULT_RATE)) \
	  $(if $(SOAK_SKIP),--skip $(SOAK_SKIP))

test-aarch64: ci-deps | $(BUILD)
	$(call configure,aarch64,-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_TESTING=ON -DWEFT_WERROR=ON -DWEFT_BUILD_BENCHMARKS=OFF \
	  -DWEFT_IO_URING=off)
	$(CMAKE) --build $(BUILD)/aarch64 -j $(JOBS)
	cd $(BUILD)/aarch64 && WEFT_QEMU=1 $(CTEST) $(CTEST_FLAGS)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cc')
check-format: ci-deps
	clang-format --dry-run --Werror $(FORMAT_FILES)
	python3 scripts/apidoc.py --check --settings src/base/settings.c include/weft.h docs/api.md
	python3 scripts/apidoc.py --check include/weft_mpi.h docs/api-mpi.md
	python3 scripts/check-layers

format:
	clang-format -i $(FORMAT_FILES)

# --- benchmarks, plots, docs ---------------------------------------------------

RESULTS ?= results
bench-deps:
	@scripts/deps.sh base bench

# Packages first: the release build then finds the optional baselines (TBB, Boost.Context).
bench: bench-deps release
	scripts/bench.sh $(BUILD)/release $(RESULTS)

# make bench-compare BASE=old-results [NEW=results] [THRESHOLD=10]: exit 1 on a
# regression beyond THRESHOLD % and beyond noise (scripts/bench-compare.sh).
.PHONY: bench-compare
THRESHOLD ?= 10
bench-compare: release
	@scripts/deps.sh base bench
	@test -n "$(BASE)" || { echo "usage: make bench-compare BASE=DIR [NEW=DIR] [THRESHOLD=PCT]"; exit 2; }
	BUILD_DIR=$(BUILD)/release scripts/bench-compare.sh $(BASE) $(or $(NEW),$(RESULTS)) $(THRESHOLD)

# make bench-ci: this commit against its parent, paired (weft-bench pair, three short cases:
# spawn, gpars math, echo), with the table on stdout and $(BUILD)/bench-ci/report.html; exit 1 on
# a regression (scripts/bench-ci.sh). The parent is built once in a git worktree under $(BUILD)/.
.PHONY: bench-ci
bench-ci: deps
	BUILD=$(BUILD) JOBS=$(JOBS) scripts/bench-ci.sh

# The HTTP benchmarks against a real nginx and wrk (scripts/bench-net.sh): weft-bench's client
# against Go's and wrk, weft-bench serve against nginx; the table on stdout, the records in
# $(RESULTS)/bench-net.jsonl.
.PHONY: bench-net
bench-net: bench-deps release
	@mkdir -p $(RESULTS)
	scripts/bench-net.sh --out $(RESULTS)/bench-net.jsonl $(BUILD)/release

plots:
	@scripts/deps.sh base plots
	@$(MAKE) --no-print-directory release
	scripts/plots.sh $(RESULTS)

# The API reference is generated from the header (check-format checks it is current).
docs:
	python3 scripts/apidoc.py --settings src/base/settings.c include/weft.h docs/api.md
	python3 scripts/apidoc.py include/weft_mpi.h docs/api-mpi.md

install: release
	$(CMAKE) --install $(BUILD)/release

clean:
	rm -rf $(BUILD)

, := ,
