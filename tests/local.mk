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
clean-local: clean-npm
clean-npm:
	-rm -rf $(builddir)/tests/npm
.PHONY: clean-npm
