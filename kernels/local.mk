# kernels/: scalar reference kernels plus per-ISA variants. Each ISA variant is
# its own convenience library so only those files get ISA-specific flags.
QD_KERNEL_ARCHIVES =

noinst_HEADERS += kernels/krn.h kernels/krn_internal.h kernels/checked.h

# Dispatch, CPU probe and the scalar reference: portable C, no ISA flags.
libqwen3d_a_SOURCES += \
	kernels/krn.c \
	kernels/ref/mmnb.c \
	kernels/ref/mmf.c \
	kernels/ref/norm.c \
	kernels/ref/rotary.c \
	kernels/ref/attn.c \
	kernels/ref/elementwise.c

# Each ISA archive is self-contained; only kernels/krn.c (in libqwen3d.a, linked
# first) refers to them, to fill the dispatch tables.
noinst_LIBRARIES += libqwen3d_avx512.a libqwen3d_avx2.a
QD_KERNEL_ARCHIVES += libqwen3d_avx512.a libqwen3d_avx2.a

# No FP contraction: the SIMD kernels write their FMAs explicitly, and code
# that promises the reference's exact operations (rotary, norms, the scalar
# tails) must not have a * b + c fused behind its back.
libqwen3d_avx2_a_CFLAGS = $(AM_CFLAGS) $(QD_KERNEL_CFLAGS) -mavx2 -mfma -mf16c -ffp-contract=off
libqwen3d_avx2_a_SOURCES = \
	kernels/avx2/simd.h \
	kernels/avx2/mmnb.c \
	kernels/avx2/mmnb_i8.h \
	kernels/avx2/mmnb8_i8.h \
	kernels/avx2/mmnb_avxvnni.c \
	kernels/avx2/mmf.c \
	kernels/avx2/norm.c \
	kernels/avx2/attn_sets.h \
	kernels/avx2/attn.c \
	kernels/avx2/rotary.c \
	kernels/avx2/elementwise.c

# VNNI is not in the flags: only avx512/mmnb_vnni.c enables it, per function.
libqwen3d_avx512_a_CFLAGS = $(AM_CFLAGS) $(QD_KERNEL_CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -ffp-contract=off
libqwen3d_avx512_a_SOURCES = \
	kernels/avx512/mmnb_i8.h \
	kernels/avx512/mmnb8_packed.h \
	kernels/avx512/mmnb.c \
	kernels/avx512/mmnb_vnni.c \
	kernels/avx512/attn.c
