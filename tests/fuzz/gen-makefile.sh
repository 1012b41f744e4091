#!/bin/sh
# Writes the makefile that builds the libFuzzer binaries of tests/fuzz/ with
# clang, independently of the project's own compiler and flags: every
# library source compiled with ASan, UBSan and fuzzer coverage into one
# archive, each target linked against it. Run by `make fuzz-build` (which
# then runs the written makefile with $(MAKE), so -j is shared); everything
# goes under OUTDIR in the build tree, nothing into the source tree.
#
# Usage: gen-makefile.sh SRCDIR BUILDDIR OUTDIR
# Environment: FUZZ_CC, FUZZ_CPPFLAGS (include flags of the libraries),
# FUZZ_LIBS, LIB_SOURCES, AVX2_SOURCES, AVX512_SOURCES (the automake source
# lists, .h files included), FUZZ_TARGETS.
set -eu
srcdir=$1 builddir=$2 out=$3
mkdir -p "$out"
mk="$out/Makefile.fuzz.tmp"
cc=${FUZZ_CC:-clang}

# clang with its libFuzzer runtime must be there; say which packages give them.
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
  >"$out/probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined -o "$out/probe" "$out/probe.c" >"$out/probe.log" 2>&1; then
  echo "fuzz-build: '$cc' cannot build a libFuzzer program: $(head -n 3 "$out/probe.log")" >&2
  echo "fuzz-build: install the Debian packages clang and libclang-rt-14-dev (bash deploy/install-deps.sh --test)," >&2
  echo "fuzz-build: or name another clang with FUZZ_CC=..." >&2
  exit 1
fi
rm -f "$out/probe" "$out/probe.c" "$out/probe.log"

# A source of the lists lives in the build tree when it is generated there
# (engine/onnx.pb-c.c in a development build), otherwise in the source tree.
locate() {
  if [ -f "$builddir/$1" ]; then echo "$builddir/$1"; else echo "$srcdir/$1"; fi
}

{
  echo "# Written by tests/fuzz/gen-makefile.sh; do not edit."
  echo "CC = $cc"
  echo "BASE_CFLAGS = -g -O1 -std=gnu11 -fno-omit-frame-pointer -fno-strict-aliasing -D_GNU_SOURCE \\"
  echo "	-fsanitize=address,undefined -fno-sanitize-recover=undefined \\"
  echo "	-I$srcdir -I$builddir ${FUZZ_CPPFLAGS:-}"
  # No stack-depth feature: libFuzzer measures the depth in bytes from where
  # the stack starts, so frame alignment padding (which moves with ASLR and
  # the size of the environment) changed the coverage of a seeded run.
  echo "COV = -fsanitize=fuzzer-no-link -fno-sanitize-coverage=stack-depth"
  echo "AVX2 = -mavx2 -mfma -mf16c -ffp-contract=off"
  echo "AVX512 = \$(AVX2) -mavx512f -mavx512bw -mavx512vl"
  echo "LIBS = ${FUZZ_LIBS:-}"
  echo "OBJS ="
  echo
  rule() { # SOURCE OBJECT EXTRA-FLAGS
    echo "OBJS += $2"
    echo "$2: $1 Makefile.fuzz"
    echo "	@mkdir -p \$(@D)"
    echo "	@echo '  CC(fuzz) $2'"
    echo "	@\$(CC) \$(BASE_CFLAGS) \$(COV) $3 -MMD -MP -c $1 -o \$@"
    echo "-include ${2%.o}.d"
  }
  for f in ${LIB_SOURCES:-}; do
    case "$f" in *.c) rule "$(locate "$f")" "obj/${f%.c}.o" "" ;; esac
  done
  for f in ${AVX2_SOURCES:-}; do
    case "$f" in *.c) rule "$(locate "$f")" "obj/${f%.c}.o" "\$(AVX2)" ;; esac
  done
  for f in ${AVX512_SOURCES:-}; do
    case "$f" in *.c) rule "$(locate "$f")" "obj/${f%.c}.o" "\$(AVX512)" ;; esac
  done
  echo
  echo "libfuzz.a: \$(OBJS)"
  echo "	@rm -f \$@"
  echo "	@ar rcs \$@ \$(OBJS)"
  bins=""
  for t in ${FUZZ_TARGETS:-}; do
    o="obj/tests/fuzz/fuzz_$t.o"
    echo "$o: $srcdir/tests/fuzz/fuzz_$t.c Makefile.fuzz"
    echo "	@mkdir -p \$(@D)"
    echo "	@echo '  CC(fuzz) $o'"
    echo "	@\$(CC) \$(BASE_CFLAGS) \$(COV) -MMD -MP -c $srcdir/tests/fuzz/fuzz_$t.c -o \$@"
    echo "-include ${o%.o}.d"
    echo "bin/fuzz_$t: $o libfuzz.a"
    echo "	@mkdir -p \$(@D)"
    echo "	@echo '  LD(fuzz) \$@'"
    echo "	@\$(CC) -fsanitize=fuzzer,address,undefined -o \$@ $o libfuzz.a \$(LIBS)"
    bins="$bins bin/fuzz_$t"
  done
  echo
  echo "all:$bins"
  echo ".PHONY: all"
  echo ".DEFAULT_GOAL := all"
} >"$mk"
# Replace only when it changed, so make does not rebuild for nothing.
if cmp -s "$mk" "$out/Makefile.fuzz"; then rm -f "$mk"; else mv "$mk" "$out/Makefile.fuzz"; fi
