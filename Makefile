# rdmax: plain GNU Make. `make` builds the examples and tests; `make test` runs them (host tests, then
# the device tests on soft-RoCE in a VM, or on the host's own RDMA device); `make soak` the long fault
# tests; `make fuzz` the fuzzers; `make demo` shows the RC ping-pong beside ib_send_lat; `make bench`
# runs the side-by-side benchmark.
CC ?= cc
CXX ?= c++
CFLAGS ?= -O2 -g
PREFIX ?= /usr/local
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(PREFIX)/lib/pkgconfig
# The version comes from rdmax.h's macros, so the .pc never disagrees with the header.
VERSION := $(shell sed -n 's/^\#define RDMAX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' rdmax.h | paste -sd.)
WARN := -Wall -Wextra -Werror
REQ_CFLAGS := -std=c11 -pedantic $(WARN) -I.
LIBS := -libverbs -lrdmacm -lnuma -lm -lpthread
B := build
HDRS := rdmax.h rdmax_impl.h

EXAMPLES := $(B)/rdmax_pingpong_rc $(B)/rdmax_pingpong_ud $(B)/rdmax_bw $(B)/rdmax_pageserver \
            $(B)/readme_example $(B)/ex_put $(B)/ex_multicast $(B)/ex_pending $(B)/ex_rcache $(B)/rdmax_rpc
TESTS := $(B)/failure_test $(B)/oob_test $(B)/cm_test $(B)/datapath_test $(B)/ud_test $(B)/numa_test $(B)/pending_test \
         $(B)/rcache_device_test $(B)/rcache_device_hooks_test $(B)/rcache_device_static_test \
         $(B)/profile_test $(B)/profile_points_test $(B)/misuse_test \
         $(B)/misuse_rcud_test $(B)/twohost_test $(B)/netem_test $(B)/kill_test $(B)/srq_test $(B)/scale_test
# The benchmark's raw-verbs floor (no rdmax in it) and instruction counter (bench-progs builds the
# copies bench/run.sh measures).
BENCH_TOOLS := $(B)/floor $(B)/instr
FUZZ_TARGETS := conn recv srq arbiter rcache
# Host tests of pure parts (wire format over TCP, arbiter, rcache bookkeeping, the fuzz corpora) run under
# ASan and UBSan;
# the memory-hook test runs without them (ASan interposes the same calls).
HOST_TESTS := $(B)/host/oob_test $(B)/host/arbiter_test $(B)/host/rcache_test $(B)/host/memhook_test \
              $(FUZZ_TARGETS:%=$(B)/host/fuzz_%) $(B)/host/embed_test $(B)/host/rcache_monitor_test \
              $(B)/host/errors_test $(B)/host/fabric_test
SAN := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The device tests built the same way, into $(B)/san (make san-tests): make test runs them in the VM on
# the dummy topology (tests/guest.sh san). Not rcache_device_test: it reads glibc's malloc chunk headers
# and sets glibc's malloc policy, which ASan's allocator replaces.
SAN_DEV_TESTS := datapath_test failure_test oob_test ud_test numa_test pending_test profile_test misuse_test \
                 misuse_rcud_test kill_test srq_test
# Tests of the opt-in memory hooks and malloc policy ask for them; everything else gets the default.
HOOKS := -DRDMAX_MEMHOOKS -DRDMAX_MALLOPT
# Fuzz targets (tests/fuzz/): `make fuzz` runs each under libFuzzer (clang) for FUZZ_SECONDS and keeps its
# corpus in tests/fuzz/TARGET/; `make test` replays every corpus with the same sources built under $(SAN).
FUZZ_SECONDS ?= 120
FUZZ_CC ?= clang
FUZZ_SAN := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all

.PHONY: all examples tests san-tests bench-progs test check soak demo bench asan ubsan clean install uninstall deps fuzz fuzz-cov
all: examples tests $(BENCH_TOOLS) $(B)/arbiter_bench

examples: $(EXAMPLES)
tests: $(TESTS) $(HOST_TESTS)

$(B):
	mkdir -p $(B)

$(B)/rdmax_pingpong_rc: examples/rdmax_pingpong.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(B)/rdmax_pingpong_ud: examples/rdmax_pingpong.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -DRDMAX_PINGPONG_TRANSPORT_UD -o $@ $< $(LIBS)
$(B)/rdmax_bw: examples/rdmax_bw.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(B)/rdmax_pageserver: examples/rdmax_pageserver.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(B)/rdmax_rpc: examples/rdmax_rpc.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
# The small one-topic examples (examples/ex_*.c; tests/examples_test.sh runs them).
$(B)/ex_%: examples/ex_%.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
# The README's example program, extracted as it stands (tests/readme_test.sh runs it).
$(B)/readme_example.c: README.md | $(B)
	sed -n '/^<!-- readme-example: begin -->$$/,/^<!-- readme-example: end -->$$/p' README.md | \
	    sed '/^<!--/d; /^```/d' > $@
	grep -q 'int main' $@
$(B)/readme_example: $(B)/readme_example.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(B)/floor: bench/floor.c bench/clock.h | $(B)
	$(CC) $(CFLAGS) -std=c11 -pedantic $(WARN) -o $@ $< -libverbs -lm
$(B)/instr: bench/instr.c $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(B)/%_test: tests/%_test.c tests/testlib.h $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) $(TFLAGS) -o $@ $< $(LIBS)
$(B)/rcache_device_hooks_test: tests/rcache_device_test.c tests/testlib.h $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) $(HOOKS) -o $@ $< $(LIBS)
# The same routes in a -static program (rdma-core ships libibverbs.a and the rxe provider's archive).
# --no-warnings: glibc's notes that getaddrinfo needs its shared NSS modules at run time.
STATIC_LIBS := -Wl,--no-warnings -Wl,--whole-archive -lrxe-rdmav34 -Wl,--no-whole-archive -libverbs \
               -lnl-route-3 -lnl-3 -lnuma -lm -lpthread
$(B)/rcache_device_static_test: tests/rcache_device_test.c tests/testlib.h $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -static -o $@ $< $(STATIC_LIBS)

$(B)/profile_points_test: tests/profile_test.c tests/testlib.h $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -DRDMAX_PROFILE -o $@ $< $(LIBS)
# the misuse table again with both transports, so that UD endpoints exist
$(B)/misuse_rcud_test: tests/misuse_test.c tests/testlib.h $(HDRS) | $(B)
	$(CC) $(CFLAGS) $(REQ_CFLAGS) -DMISUSE_RC_UD -o $@ $< $(LIBS)

$(B)/host:
	mkdir -p $(B)/host
$(B)/host/memhook_test: tests/memhook_test.c tests/testlib.h $(HDRS) | $(B)/host
	$(CC) -O1 -g $(REQ_CFLAGS) $(HOOKS) -o $@ $< $(LIBS)
# The memory monitor (userfaultfd) with fake registration ops; also run in the VM (the guest's kernel).
$(B)/host/rcache_monitor_test: tests/rcache_monitor_test.c tests/testlib.h $(HDRS) | $(B)/host
	$(CC) -O1 -g $(REQ_CFLAGS) -DRDMAX_RCACHE_EVENT_RING_SIZE=64 -o $@ $< $(LIBS)
# A program that links the implementation with no option: the test reads the object's symbols.
$(B)/host/embed_impl.o: tests/embed_impl.c $(HDRS) | $(B)/host
	$(CC) -O1 -g $(REQ_CFLAGS) -c -o $@ $<
$(B)/host/embed_impl_cxx.o: tests/embed_impl.c $(HDRS) | $(B)/host
	$(CXX) -O1 -g -x c++ -std=c++17 -pedantic $(WARN) -I. -c -o $@ $<
$(B)/host/embed_test: tests/embed_test.c tests/testlib.h $(B)/host/embed_impl.o $(B)/host/embed_impl_cxx.o | $(B)/host
	$(CC) -O1 -g $(REQ_CFLAGS) -o $@ $< $(B)/host/embed_impl.o $(LIBS)
$(B)/host/%_test: tests/%_test.c tests/testlib.h $(HDRS) | $(B)/host
	$(CC) $(SAN) $(REQ_CFLAGS) -o $@ $< $(LIBS)
# the tests on the fake verbs device
$(B)/host/fabric_test: tests/fakedev.h
$(B)/host/fuzz_recv $(B)/host/fuzz_srq $(B)/fuzz/recv $(B)/fuzz/srq: tests/fakedev.h tests/fuzz/rxfuzz.h
$(B)/host/fuzz_%: tests/fuzz/%_fuzz.c tests/fuzz/fuzz.h $(HDRS) | $(B)/host
	$(CC) $(SAN) $(REQ_CFLAGS) -DRDMAX_FUZZ_REPLAY -o $@ $< $(LIBS)
$(B)/host/fuzz_arbiter $(B)/fuzz/arbiter: tests/arbiter_test.c

$(B)/fuzz:
	mkdir -p $(B)/fuzz
$(B)/fuzz/%: tests/fuzz/%_fuzz.c tests/fuzz/fuzz.h $(HDRS) | $(B)/fuzz
	$(FUZZ_CC) $(FUZZ_SAN) $(REQ_CFLAGS) -o $@ $< $(LIBS)

# Benchmark programs (bench/run.sh builds them with `make bench-progs` and runs them from build-bench/):
# the examples as measured, the same with the profile points compiled in, the raw-verbs floor, the
# instruction counter, the clock check (how the guest reads time), the access-scoping costs (memory
# windows beside plain registrations), the arbiter benchmark (beside UCX's ucs_arbiter when libucs links:
# then $(BB)/arbiter_bench.ucs exists), and, built by bench/run.sh only if libucx-dev is there, the rcache
# one.
BB := build-bench
bench-progs: $(BB)/rdmax_bw $(BB)/rdmax_pageserver $(BB)/rdmax_pingpong_rc $(BB)/rdmax_pingpong_rc_prof \
             $(BB)/rdmax_bw_prof $(BB)/arbiter_bench $(BB)/instr $(BB)/floor $(BB)/clockcheck $(BB)/scope
$(BB):
	mkdir -p $(BB)
$(BB)/rdmax_%: examples/rdmax_%.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(BB)/rdmax_pingpong_rc: examples/rdmax_pingpong.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(BB)/rdmax_pingpong_rc_prof: examples/rdmax_pingpong.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -DRDMAX_PROFILE -o $@ $< $(LIBS)
$(BB)/rdmax_bw_prof: examples/rdmax_bw.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -DRDMAX_PROFILE -o $@ $< $(LIBS)
$(BB)/instr: bench/instr.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(BB)/scope: bench/scope.c bench/clock.h $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(BB)/floor: bench/floor.c bench/clock.h | $(BB)
	$(CC) -O2 -g -std=c11 -pedantic $(WARN) -o $@ $< -libverbs -lm
$(BB)/clockcheck: bench/clockcheck.c | $(BB)
	$(CC) -O2 -g -std=c11 -pedantic $(WARN) -o $@ $<
$(B)/arbiter_bench: bench/arbiter_bench.c $(HDRS) | $(B)
	$(CC) -O2 -DNDEBUG $(REQ_CFLAGS) -o $@ $< $(LIBS)
# With UCX's ucs_arbiter when libucs links (its declarations are not -pedantic clean), else rdmax's alone.
$(BB)/arbiter_bench: bench/arbiter_bench.c $(HDRS) | $(BB)
	@rm -f $@.ucs
	$(CC) -O2 -DNDEBUG -std=c11 -I. -DRDMAX_BENCH_UCS -o $@ $< $(LIBS) -lucs && touch $@.ucs || \
	    $(CC) -O2 -DNDEBUG $(REQ_CFLAGS) -o $@ $< $(LIBS)
$(BB)/rcache_bench: bench/rcache_bench.c $(HDRS) | $(BB)
	$(CC) -O2 -g $(REQ_CFLAGS) -o $@ $< -lucs $(LIBS)

# Installs the Debian packages the build and the tests need (as root; prints the line otherwise).
deps:
	@tests/deps.sh

san-tests:
	@$(MAKE) --no-print-directory B=$(B)/san CFLAGS="$(SAN)" $(SAN_DEV_TESTS:%=$(B)/san/%)

test: deps
	@$(MAKE) --no-print-directory all san-tests
	@tests/run_all.sh

check: test

# The long forms of the fault tests (README, "Faults, fuzzing and sanitizers"; tests/soak.sh).
soak: deps
	@$(MAKE) --no-print-directory all san-tests
	@tests/soak.sh

fuzz:
	@tests/deps.sh fuzz
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=$(B)/fuzz/%)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) RDMAX_BUILD=$(B) tests/fuzz/run.sh $(FUZZ_TARGETS)

# Line coverage of the functions each fuzz target drives, by its committed corpus (clang, llvm-cov).
fuzz-cov:
	@tests/deps.sh fuzz
	@RDMAX_BUILD=$(B) tests/fuzz/cov.sh $(FUZZ_TARGETS)

demo: deps
	@$(MAKE) --no-print-directory examples
	@tests/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all bench-progs
	@bench/run.sh

asan:
	$(MAKE) B=build-asan CFLAGS="-O1 -g -fsanitize=address -fno-omit-frame-pointer" all
ubsan:
	$(MAKE) B=build-ubsan CFLAGS="-O1 -g -fsanitize=undefined -fno-sanitize-recover=all" all

# make install [PREFIX=/usr/local] [DESTDIR=]: the two headers in $(INCLUDEDIR)/rdmax/ (rdmax.h includes
# rdmax_impl.h from beside itself) and rdmax.pc. The implementation is compiled into the program that
# includes rdmax.h, so the program itself calls verbs, rdma_cm and libnuma: they are Requires, not
# Requires.private, or `pkg-config --libs rdmax` would leave them out (tests/install_test.sh links with it).
# (Written on every install: PREFIX may differ from the last one.) includedir follows ${prefix} when it is
# the default, so `pkg-config --define-variable=prefix=...` relocates a DESTDIR copy.
PC_INCLUDEDIR = $(if $(filter $(PREFIX)/include,$(INCLUDEDIR)),$${prefix}/include,$(INCLUDEDIR))
.PHONY: $(B)/rdmax.pc
$(B)/rdmax.pc: | $(B)
	@test -n '$(VERSION)' || { echo "no RDMAX_VERSION_* macros in rdmax.h"; exit 1; }
	printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$(PC_INCLUDEDIR)' '' 'Name: rdmax' \
	    'Description: header-only RDMA transport (verbs RC and UD: send, put, get, atomics)' \
	    'Version: $(VERSION)' 'Requires: libibverbs librdmacm numa' 'Cflags: -I$${includedir}/rdmax' > $@

install: $(B)/rdmax.pc
	install -d $(DESTDIR)$(INCLUDEDIR)/rdmax $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 $(HDRS) $(DESTDIR)$(INCLUDEDIR)/rdmax/
	install -m 644 $(B)/rdmax.pc $(DESTDIR)$(PKGCONFIGDIR)/rdmax.pc

# make uninstall: the files, then each folder install -d may have made, walking up from include/rdmax
# and lib/pkgconfig while the folder is empty (rmdir never removes one that is not). The walk stops
# below PREFIX (/usr/local is not ours), or with DESTDIR below DESTDIR: a staging tree's prefix and its
# parents were made by install, so a fresh DESTDIR is left empty.
UNINSTALL_STOP = $(if $(DESTDIR),,$(PREFIX))
uninstall:
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/rdmax/,$(HDRS)) $(DESTDIR)$(PKGCONFIGDIR)/rdmax.pc
	@stop='$(UNINSTALL_STOP)'; for d in '$(INCLUDEDIR)/rdmax' '$(PKGCONFIGDIR)'; do \
	    while case $$d in "$$stop"/?*) true;; *) false;; esac && rmdir '$(DESTDIR)'"$$d" 2>/dev/null; do \
	        d=$$(dirname "$$d"); done; \
	done

clean:
	rm -rf build build-asan build-ubsan $(BB)
