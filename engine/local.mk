# engine/: ONNX loading, the execution plan, tokenizer, sampler; the model writer in engine/writer/.
ONNX_PB = engine/onnx.pb-c.c engine/onnx.pb-c.h
BUILT_SOURCES += $(ONNX_PB)
EXTRA_DIST += engine/onnx.proto
MAINTAINERCLEANFILES = $(ONNX_PB)

# The generated sources are shipped in the tarball, so a build from a release
# does not need protoc-c unless the schema changes.
$(ONNX_PB): engine/onnx.proto
	$(AM_V_GEN)$(PROTOC_C) --c_out=$(builddir) -I$(srcdir) $(srcdir)/engine/onnx.proto

libqwen3d_a_SOURCES += \
	$(ONNX_PB) \
	engine/diag.c engine/diag.h \
	engine/model.c engine/model.h \
	engine/genai_config.c engine/genai_config.h \
	engine/geometry.c engine/geometry.h

# The model writer behind `qwen3d synth` (engine/writer/): ONNX protobuf
# output and the synthetic Qwen3 graphs. Its own archive, linked into the
# command line and the tests, never into the runtime library.
noinst_LIBRARIES += libqwen3d_writer.a
libqwen3d_writer_a_SOURCES = \
	engine/writer/onnx_write.c engine/writer/onnx_write.h \
	engine/writer/synth.c engine/writer/synth.h engine/writer/synth_std.c engine/writer/synth_internal.h

# Tokenizer: Hugging Face tokenizer.json, byte-level BPE (PCRE2, utf8proc).
libqwen3d_a_SOURCES += engine/tokenizer.c engine/tokenizer.h engine/tok_internal.h engine/tok_load.c engine/tok_read.c \
	engine/tok_unicode.c

# Execution: the plan (node binding and the op registry), its fusions and
# packed weights, the op adapters by family, the executor, the compute pool
# and model sessions.
libqwen3d_a_SOURCES += \
	engine/pool.c engine/pool.h \
	engine/plan.c engine/plan.h engine/plan_internal.h engine/op_registry.h \
	engine/lower.c engine/fuse.c engine/pack.c engine/prepcache.c \
	engine/op_shape.c engine/op_math.c engine/op_norm.c engine/op_matmul.c engine/op_attention.c \
	engine/op_gather_quant.c \
	engine/exec.c \
	engine/runner.c engine/runner.h

# Sampler (penalties, temperature, top-k/top-p/min-p, seeded draw) and stop strings.
libqwen3d_a_SOURCES += \
	engine/sampler.c engine/sampler.h \
	engine/stop.c engine/stop.h

# Constrained decoding: grammars (builder, compiler) and the per-step token mask.
libqwen3d_a_SOURCES += \
	engine/grammar.c engine/grammar.h engine/grammar_int.h \
	engine/grammar_match.c

# Generations: a session with its sampler, stop strings and detokenizer,
# and the step that advances many of them.
libqwen3d_a_SOURCES += engine/gen.c engine/gen.h

# The prompt-prefix cache: finished sessions' prompt KV state, found by
# the longest common prefix of token ids.
libqwen3d_a_SOURCES += engine/prefix.c engine/prefix.h
