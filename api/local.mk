# api/: JSON request parsing, chat template, OpenAI response shapes, SSE framing.
