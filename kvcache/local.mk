# kvcache/: per-session contiguous K/V storage.
libqwen3d_a_SOURCES += kvcache/kv.c kvcache/kv.h
