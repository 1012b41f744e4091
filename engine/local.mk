# engine/: ONNX loading, the execution plan, tokenizer, sampler, model writer.
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
	engine/genai_config.c engine/genai_config.h
