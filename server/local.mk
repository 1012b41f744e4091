# server/: the HTTP daemon, its scheduler, metrics and pages; the command
# line in server/cli/.

# The commands (server/cli/): option parsing and one file per command but
# serve, whose daemon is the rest of server/. Their own archive, linked into
# qwen3d and the tests.
noinst_LIBRARIES += libqwen3d_cli.a
libqwen3d_cli_a_SOURCES = \
	server/cli/cli.c server/cli/cli.h \
	server/cli/cmd_inspect.c \
	server/cli/cmd_synth.c \
	server/cli/cmd_generate.c \
	server/cli/cmd_bench.c \
	server/cli/cmd_tokenize.c

# `qwen3d serve`: HTTP daemon (libmicrohttpd inside a libuv loop), scheduler
# and compute thread, routes, metrics, SSE framing, sd_notify, logs.
libqwen3d_a_SOURCES += \
	server/cmd_serve.c \
	server/options.c server/options.h \
	server/error.c server/error.h \
	server/fingerprint.c server/fingerprint.h \
	server/http.c server/http.h \
	server/keys.c server/keys.h \
	server/log.c server/log.h \
	server/metrics.c server/metrics.h \
	server/notify.c server/notify.h \
	server/routes.c server/routes.h \
	server/sched.c server/sched.h \
	server/sse.c server/sse.h \
	server/sysmem.c server/sysmem.h

# The web UI (GET /, GET /status, /status.json): the page files of
# server/webui/ are compiled into the binary as a table that
# server/webui/embed.js generates (index.html is served at /, status.html
# at /status, the others under /webui/). Like engine/onnx.pb-c.c, the
# generated file is shipped in the tarball.
WEBUI_FILES = \
	server/webui/index.html server/webui/status.html server/webui/style.css server/webui/icon.svg \
	server/webui/common.js server/webui/markdown.js server/webui/chat.js server/webui/status.js
BUILT_SOURCES += server/webui_assets.c
MAINTAINERCLEANFILES += server/webui_assets.c
EXTRA_DIST += server/webui/embed.js $(WEBUI_FILES)
libqwen3d_a_SOURCES += \
	server/webui.c server/webui.h \
	server/webui_assets.c server/webui_assets.h
server/webui_assets.c: $(WEBUI_FILES) server/webui/embed.js
	$(AM_V_GEN)$(MKDIR_P) server && \
	$(NODE) $(srcdir)/server/webui/embed.js $@ $(srcdir) $(WEBUI_FILES)
