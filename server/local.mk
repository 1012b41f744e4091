# server/: command line, HTTP daemon, scheduler, compute pool, metrics.
libqwen3d_a_SOURCES += \
	server/cli.c server/cli.h \
	server/cmd_inspect.c \
	server/cmd_synth.c \
	server/cmd_generate.c \
	server/cmd_bench.c

libqwen3d_a_SOURCES += server/cmd_tokenize.c

# `qwen3d serve`: HTTP daemon (libmicrohttpd inside a libuv loop), scheduler
# and compute thread, routes, metrics, SSE framing, sd_notify, logs.
libqwen3d_a_SOURCES += \
	server/cmd_serve.c \
	server/options.c server/options.h \
	server/error.c server/error.h \
	server/http.c server/http.h \
	server/log.c server/log.h \
	server/metrics.c server/metrics.h \
	server/notify.c server/notify.h \
	server/routes.c server/routes.h \
	server/sched.c server/sched.h \
	server/sse.c server/sse.h \
	server/sysmem.c server/sysmem.h
