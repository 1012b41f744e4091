# api/: JSON request parsing, chat template, OpenAI response shapes, SSE framing.

# Qwen3 chat template, rendered natively, and the reasoning/content split.
libqwen3d_a_SOURCES += api/chat_template.c api/chat_template.h

# Request parsing, OpenAI response shapes and the API error table.
libqwen3d_a_SOURCES += \
	api/error.c api/error.h \
	api/parse.c api/parse.h \
	api/render.c api/render.h

# JSON Schema, JSON mode and tool calls compiled to engine grammars.
libqwen3d_a_SOURCES += api/schema.c api/schema.h
libqwen3d_a_SOURCES += api/toolcall.c api/toolcall.h
