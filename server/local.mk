# server/: command line, HTTP daemon, scheduler, compute pool, metrics.
libqwen3d_a_SOURCES += \
	server/cli.c server/cli.h \
	server/cmd_inspect.c \
	server/cmd_synth.c
