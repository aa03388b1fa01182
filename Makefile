# agsx top-level Makefile.
#
# This file is committed so that the README's commands work on a fresh clone
# with nothing generated yet: it runs autoreconf and configure on demand, in
# out-of-tree build directories, and forwards to the automake build there.
#
#   make            build ./build/agsx
#   make demo       install missing Debian packages, build, run the demo
#   make base-image build the e2b-base image (images/base, E2B's `base`
#                   shape) offline from Debian's archive into the store
#   make desktop-image  the same for e2b-desktop (images/desktop, E2B's
#                   `desktop` shape: Xfce on Xvfb, for @e2b/desktop)
#   make check      build (plain + ASan/UBSan + libFuzzer) and run every test,
#                   TEST_JOBS suites at once (default: the number of CPUs),
#                   each fuzz target for CHECK_FUZZ_SECONDS (default 2), and
#                   the guest lane on Debian 12's kernel (CHECK_GUESTS,
#                   default 6.1; empty: none): test/guest/lane
#   make check-hosts  the guest lane's full set on every kernel of
#                   HOST_KERNELS (6.1 6.12 newest), one after the other
#   make fuzz       run each fuzz target for FUZZ_SECONDS (default 60)
#   make format-check  list the C files that differ from .clang-format (make
#                   check runs it first); make format rewrites them
#   make bench      run the benchmarks in bench/
#   make install    install from ./build (PREFIX via CONFIGURE_FLAGS)
#
# CONFIGURE_FLAGS go to every build's configure (CI: --enable-werror); a
# build directory is configured again when they change.
SHELL := /bin/bash
top := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
B := $(top)/build
BASAN := $(top)/build-asan
BFUZZ := $(top)/build-fuzz
CONFIGURE_FLAGS ?=
export CONFIGURE_FLAGS
FUZZ_SECONDS ?= 60
CHECK_FUZZ_SECONDS ?= 2
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CHECK_GUESTS ?= 6.1
HOST_KERNELS ?= 6.1 6.12 newest
TEST_JOBS ?= $(JOBS)

.PHONY: all deps demo base-image desktop-image check check-hosts check-quick format-check format fuzz bench install clean distclean FORCE

all: $(B)/Makefile
	@$(MAKE) --no-print-directory -C $(B) -j$(JOBS)

deps:
	@$(top)/scripts/deps.sh

# The packages first: on a fresh machine autoreconf itself is missing.
$(top)/configure: $(top)/configure.ac $(top)/Makefile.am $(top)/test/fuzz/targets.am $(wildcard $(top)/m4/*.m4)
	@$(top)/scripts/deps.sh
	cd $(top) && autoreconf -fi >/dev/null

# The fuzz targets' automake lines, from FUZZ_TARGETS in Makefile.am
# (rewritten only when they change, so this does not force autoreconf).
$(top)/test/fuzz/targets.am: FORCE
	@$(top)/scripts/gen-fuzz-am

# The flags each build directory was configured with: a change of
# CONFIGURE_FLAGS configures it again.
$(B)/.configure-flags $(BASAN)/.configure-flags $(BFUZZ)/.configure-flags: FORCE
	@mkdir -p $(@D); printf '%s\n' "$$CONFIGURE_FLAGS" | cmp -s - $@ || printf '%s\n' "$$CONFIGURE_FLAGS" >$@

$(B)/Makefile: $(top)/configure $(B)/.configure-flags
	@$(top)/scripts/deps.sh
	cd $(B) && $(top)/configure --quiet $(CONFIGURE_FLAGS)

$(BASAN)/Makefile: $(top)/configure $(BASAN)/.configure-flags
	cd $(BASAN) && $(top)/configure --quiet --enable-sanitizers $(CONFIGURE_FLAGS)

$(BFUZZ)/Makefile: $(top)/configure $(BFUZZ)/.configure-flags
	cd $(BFUZZ) && CC=clang $(top)/configure --quiet --enable-fuzzing $(CONFIGURE_FLAGS)

demo: all
	@$(top)/scripts/demo.sh $(B)

base-image: all
	@$(top)/scripts/base-image.sh $(B)

desktop-image: all
	@$(top)/scripts/base-image.sh $(B) desktop

# One run over every build; test/run-tests prints the one summary line.
# The source format is checked first: it takes seconds.
check: format-check $(B)/Makefile $(BASAN)/Makefile $(BFUZZ)/Makefile
	@$(MAKE) --no-print-directory -C $(B) -j$(JOBS) check-build
	@$(MAKE) --no-print-directory -C $(BASAN) -j$(JOBS) check-build
	@$(MAKE) --no-print-directory -C $(BFUZZ) -j$(JOBS) all
	@FUZZ_SECONDS=$(CHECK_FUZZ_SECONDS) $(top)/test/run-tests --jobs $(TEST_JOBS) \
	  --fuzz $(BFUZZ) $(foreach k,$(CHECK_GUESTS),--guest $(k)) $(B) $(BASAN)

# The kernel matrix in guests (systemd, cgroup v2), against the plain build.
check-hosts: $(B)/Makefile
	@$(top)/scripts/deps.sh --test
	@$(MAKE) --no-print-directory -C $(B) -j$(JOBS) check-build
	@LANE_SET=full $(top)/test/run-tests --jobs 1 --guests-only $(foreach k,$(HOST_KERNELS),--guest $(k)) $(B)

# Only the plain build, for a quick edit-test loop.
check-quick: $(B)/Makefile
	@$(top)/scripts/deps.sh --test
	@$(MAKE) --no-print-directory -C $(B) -j$(JOBS) check-build
	@$(top)/test/run-tests --jobs $(TEST_JOBS) $(B)

format-check:
	@$(top)/scripts/deps.sh --test
	@$(top)/scripts/gen-fuzz-am --check
	@$(top)/scripts/format-check

format:
	@$(top)/scripts/format-check --fix

fuzz: $(BFUZZ)/Makefile
	@$(MAKE) --no-print-directory -C $(BFUZZ) -j$(JOBS) all
	@FUZZ_SECONDS=$(FUZZ_SECONDS) $(top)/test/fuzz/run-fuzzers $(BFUZZ)

bench: all
	@$(MAKE) --no-print-directory -C $(B) -j$(JOBS) test/fixtures/probe
	@$(top)/bench/run $(B)

install: all
	@$(MAKE) --no-print-directory -C $(B) install

clean:
	rm -rf $(B) $(BASAN) $(BFUZZ)

distclean: clean
	cd $(top) && rm -rf autom4te.cache build-aux aclocal.m4 configure config.h.in config.h.in~ Makefile.in
