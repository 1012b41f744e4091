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
	NODE_PATH=$(abs_top_builddir)/tests/npm/node_modules; export NODE_PATH;

TEST_LDADD = $(QD_ARCHIVES) $(CHECK_LIBS) $(QD_LIBS)
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

# Model level: teacher-forced logits against ONNX Runtime (tiny and a 0.6b-width
# model with 4 layers, each also as written by another writer), and greedy
# determinism across thread counts.
TESTS += tests/engine_vs_ort.sh
EXTRA_DIST += tests/engine_vs_ort.sh tests/ort/compare-logits.js

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

# Persistent KV sessions against the tensor contract, and KV bytes per token.
TESTS += tests/kv_modes.sh
EXTRA_DIST += tests/kv_modes.sh

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
TESTS += tests/test_api tests/serve_api.sh tests/serve_ops.sh
EXTRA_DIST += tests/serve_api.sh tests/serve_ops.sh tests/serve/common.sh tests/serve/http-checks.js \
	tests/serve/metrics-parse.js tests/serve/openai-client.js tests/api
clean-local: clean-serve
clean-serve:
	-rm -rf $(builddir)/tests/serve-model $(builddir)/tests/serve_api-work $(builddir)/tests/serve_ops-work
.PHONY: clean-serve

# Sessions of one model are isolated; freed sessions return their memory.
check_PROGRAMS += tests/test_session
tests_test_session_SOURCES = tests/test_session.c
tests_test_session_CFLAGS = $(TEST_CFLAGS)
tests_test_session_LDADD = $(TEST_LDADD)
TESTS += tests/test_session
