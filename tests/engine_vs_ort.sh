#!/bin/sh
# Model-level: qwen3d's teacher-forced logits against ONNX Runtime's on the
# same folder, for the tiny preset and a 0.6b-width model with 4 layers, and
# on each written again by another ONNX writer; the tiny preset once more
# with full fp32 weights (scales that fit no 16-bit form), once with
# every projection quantized asymmetrically (zero points, as an export with
# int4_is_symmetric=false has them), twice in larger blocks (128 without
# and 64 with zero points), and with 8-bit projections (mixed precision as
# k_quant_mixed writes it, on the 0.6b-width model too, and all at 8 bits),
# and with the tied embedding those exports read through GatherBlockQuantized.
# A 7-id prompt, then 32
# teacher-forced decode steps: 33 logits rows per run. The tolerance comes
# from ONNX Runtime itself (accuracy_level 4 against 0), see compare-logits.js.
# Greedy output must also be identical for 1 and 2 threads and across runs.
#
# Every kernel table runs here: each one this CPU runs natively (ref, avx2
# without and with AVX-VNNI, avx512 without VNNI, avx512 with VNNI, as
# /proc/cpuinfo lists the features, independently of the probe under test),
# selected with QWEN3D_KERNELS and the QWEN3D_CPU_HIDE hook, and both
# avx512 tables once more through the build whose avx512 kernels run over
# SIMDe's emulation (tests/qwen3d-emu512), which runs wherever AVX2 does.
# Each run must use the table asked for (the plan names its kernels), agree
# with ONNX Runtime, and the SIMD tables must give the same logits bit for
# bit: their packed int8 matmuls do the AVX2 kernel's operations per column
# (test_kernels checks that per kernel) and they share every other kernel.
. "$QD_SRCDIR/tests/ort/common.sh"
ort_init engine_vs_ort

PROMPT=9707,11,1879,0,151643,3555,30
# 32 teacher ids spread over the vocabulary, both ends included
TEACHER=$("$NODE" -e 'const a=[];let x=12345;for(let i=0;i<32;i++){x=(x*1103515245+12345)%2147483648;a.push(i==0?0:i==1?151935:x%151936);}console.log(a.join(","))')

EMU=$QD_BUILDDIR/tests/qwen3d-emu512

# ours TABLE ARGS...: qwen3d with one kernel table: default (what the probe
# picks), ref, avx2, avx512, avx512vnni, or emu-avx512 / emu-avx512vnni.
ours() {
  kt=$1 bin=$QWEN3D
  shift
  case $kt in emu-*) bin=$EMU kt=${kt#emu-} ;; esac
  case $kt in
  default) "$bin" "$@" ;;
  ref) QWEN3D_KERNELS=ref "$bin" "$@" ;;
  avx2) QWEN3D_KERNELS=avx2 QWEN3D_CPU_HIDE=avxvnni "$bin" "$@" ;;
  avxvnni) QWEN3D_KERNELS=avx2 QWEN3D_CPU_HIDE= "$bin" "$@" ;;
  avx512) QWEN3D_KERNELS=avx512 QWEN3D_CPU_HIDE=avx512vnni "$bin" "$@" ;;
  avx512vnni) QWEN3D_KERNELS=avx512 QWEN3D_CPU_HIDE= "$bin" "$@" ;;
  *) ort_fail "unknown kernel table $kt" ;;
  esac
}

# ONNX Runtime's logits on ORT_DIR, at its accuracy_level and at 0, once.
ort_refs() { # ORT_DIR
  ortm=$1
  if [ ! -f "$work/$(basename "$ortm").ort.bin" ]; then
    ort_node rewrite-model.js --in "$ortm" --out "$ortm-acc0" --keep-layout --set-accuracy-level 0 ||
      ort_fail "could not write the accuracy_level 0 copy of $ortm"
    ort_node run-ort.js --model "$ortm" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" \
      --dump-logits "$work/$(basename "$ortm").ort.bin" >/dev/null || ort_fail "ONNX Runtime failed on $ortm"
    ort_node run-ort.js --model "$ortm-acc0" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" \
      --dump-logits "$work/$(basename "$ortm").ort0.bin" >/dev/null || ort_fail "ONNX Runtime failed on $ortm-acc0"
    rm -rf "$ortm-acc0"
  fi
}

compare() { # NAME MODEL_DIR ORT_DIR [TABLE]
  name=$1 model=$2 ortm=$3 table=${4:-default}
  vocab=$(ort_json "$ortm/genai_config.json" j.model.vocab_size)
  ours "$table" generate --model "$model" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" --max-tokens 33 \
    --dump-logits "$work/$name.ours.bin" --json >"$work/$name.ours.json" ||
    ort_fail "qwen3d generate failed on $name"
  ort_refs "$ortm"
  ort_node compare-logits.js --label "$name" --ours "$work/$name.ours.bin" \
    --ort "$work/$(basename "$ortm").ort.bin" --ort-fp32 "$work/$(basename "$ortm").ort0.bin" --vocab "$vocab" ||
    ort_fail "$name: qwen3d and ONNX Runtime disagree"
}

ort_synth_tiny "$work/tiny"
"$QWEN3D" synth --preset 0.6b --layers 4 --out "$work/w06l4" >"$work/synth06.log" 2>&1 ||
  ort_fail "qwen3d synth --preset 0.6b --layers 4: $(tail -n 3 "$work/synth06.log")"

for m in tiny w06l4; do
  ort_node rewrite-model.js --in "$work/$m" --out "$work/$m-rewritten" --seed 11 ||
    ort_fail "rewrite-model.js failed on $m"
  compare "$m-rewritten" "$work/$m-rewritten" "$work/$m"
  rm -rf "$work/$m-rewritten"
done

# Weights quantized from a bfloat16 checkpoint (synth's default, like Qwen3's)
# have bfloat16 scales, which the packed copy keeps in 16 bits; full fp32
# weights give scales that need all 32, and that copy must agree with ONNX
# Runtime as well.
"$QWEN3D" synth --preset tiny --weights f32 --out "$work/tiny-f32" >"$work/synth-f32.log" 2>&1 ||
  ort_fail "qwen3d synth --weights f32: $(tail -n 3 "$work/synth-f32.log")"
"$QWEN3D" inspect --model "$work/tiny" | grep -q "packed, bf16 scales" ||
  ort_fail "inspect shows no projection with bf16 scales on the tiny model"
"$QWEN3D" inspect --model "$work/tiny-f32" | grep -q "packed, bf16 scales" &&
  ort_fail "inspect shows bf16 scales on the fp32-weight tiny model"

# An asymmetric export: MatMulNBits with zero points, which the packed copy
# holds beside the scales.
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-zp" 2>"$work/asym.log" ||
  ort_fail "requantize-model.js failed: $(tail -n 3 "$work/asym.log")"
"$QWEN3D" inspect --model "$work/tiny-zp" | grep -q "(packed.*, zero points)" ||
  ort_fail "inspect shows no packed projection with zero points on the asymmetric tiny model"
# Exports quantized in larger blocks (int4_block_size 128, symmetric; 64 with
# zero points), whose packed records hold several groups of 32 k per block.
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-b128" --block-size 128 --zero-points off \
  2>"$work/b128.log" || ort_fail "requantize-model.js --block-size 128 failed: $(tail -n 3 "$work/b128.log")"
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-b64zp" --block-size 64 \
  2>"$work/b64.log" || ort_fail "requantize-model.js --block-size 64 failed: $(tail -n 3 "$work/b64.log")"
for m in tiny-b128 tiny-b64zp; do
  [ "$("$QWEN3D" inspect --model "$work/$m" | grep -c "mmnb_i8.*(packed")" -gt 0 ] ||
    ort_fail "inspect shows no packed projection on $m"
done
# Mixed-precision exports (the builder's int4_algo_config k_quant_mixed):
# 8-bit codes with zero points for the LM head and the sensitive layers' qkv
# and down projections, 4-bit for the rest; and every projection at 8 bits,
# symmetric, in blocks of 64.
for m in tiny w06l4; do
  ort_node requantize-model.js --in "$work/$m" --out "$work/$m-mix8" --eight-bit mixed 2>"$work/mix8.log" ||
    ort_fail "requantize-model.js --eight-bit mixed failed on $m: $(tail -n 3 "$work/mix8.log")"
done
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-all8" --eight-bit all --zero-points off \
  --block-size 64 2>"$work/all8.log" || ort_fail "requantize-model.js --eight-bit all failed: $(tail -n 3 "$work/all8.log")"
# Tied embeddings as the builder writes them for Qwen3 0.6B to 4B: the
# embedding is GatherBlockQuantized over a Reshape of the LM head's codes
# (8-bit with zero points under k_quant_mixed; 4-bit with zero points, and
# without them, where the default zero point 8 applies, under rtn / k_quant).
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-tie8" --eight-bit mixed --tie-embedding \
  2>"$work/tie8.log" || ort_fail "requantize-model.js --tie-embedding failed: $(tail -n 3 "$work/tie8.log")"
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-tie4" --tie-embedding 2>"$work/tie4.log" ||
  ort_fail "requantize-model.js --tie-embedding (4-bit) failed: $(tail -n 3 "$work/tie4.log")"
ort_node requantize-model.js --in "$work/tiny" --out "$work/tiny-tie4s" --zero-points off --tie-embedding \
  2>"$work/tie4s.log" || ort_fail "requantize-model.js --tie-embedding (symmetric) failed: $(tail -n 3 "$work/tie4s.log")"
for m in tiny-tie8 tiny-tie4 tiny-tie4s; do
  "$QWEN3D" inspect --model "$work/$m" | grep -q "GatherBlockQuantized.*gather_block_quantized" ||
    ort_fail "$m: inspect shows no GatherBlockQuantized step"
done

# The kernel tables, natively as far as the CPU goes, then emulated.
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() {
  for f; do
    case " $flags " in *" $f "*) ;; *) return 1 ;; esac
  done
}
tables=ref
if has avx2 fma f16c; then
  tables="$tables avx2"
  if has avx_vnni; then tables="$tables avxvnni"; fi
  if has avx512f avx512bw avx512vl; then
    tables="$tables avx512"
    if has avx512_vnni; then tables="$tables avx512vnni"; fi
  fi
  if [ -x "$EMU" ]; then
    tables="$tables emu-avx512 emu-avx512vnni"
  else
    echo "emulated avx512 tables skipped: built without libsimde-dev"
  fi
fi
echo "kernel tables: $tables"
for t in $tables; do
  # The plan names the matmul kernel of every projection: all must be the table's.
  used=$(ours "$t" inspect --model "$work/tiny" | grep -o 'mmnb_i8\.[a-z0-9]*' | sort -u | tr '\n' ' ')
  [ "$used" = "mmnb_i8.${t#emu-} " ] || ort_fail "table $t: the plan runs ${used:-no int8 matmul}"
  # 8-bit weights: the table's own kernel, or AVX2's where the level has no VNNI.
  case $t in
  *avx512) want8=avx2 ;;
  *) want8=${t#emu-} ;;
  esac
  used=$(ours "$t" inspect --model "$work/tiny-mix8" | grep -o 'mmnb8_i8\.[a-z0-9]*' | sort -u | tr '\n' ' ')
  [ "$used" = "mmnb8_i8.$want8 " ] || ort_fail "table $t: the 8-bit projections run ${used:-no 8-bit matmul}"
  case $t in
  emu-*)
    ours "$t" inspect --model "$work/tiny" | grep -q '^kernels avx512 (.*avx512 emulated' ||
      ort_fail "table $t: the emulated build does not say it runs emulated avx512"
    ;;
  esac
  # On w06l4 the scalar reference takes a minute and the emulated VNNI
  # matmul ten times the native one's time; test_kernels holds both to the
  # definitions on every shape of the real models.
  case $t in
  ref) models="tiny tiny-zp tiny-b128 tiny-b64zp tiny-mix8 tiny-all8" ;;
  emu-*) models="tiny tiny-f32 tiny-zp tiny-b128 tiny-b64zp tiny-mix8 tiny-all8" ;;
  *) models="tiny w06l4 tiny-f32 tiny-zp tiny-b128 tiny-b64zp tiny-mix8 tiny-all8 w06l4-mix8" ;;
  esac
  for m in $models; do
    compare "$m.$t" "$work/$m" "$work/$m" "$t"
    [ "$t" = ref ] && continue
    if [ -f "$work/$m.simd.bin" ]; then
      cmp -s "$work/$m.simd.bin" "$work/$m.$t.ours.bin" ||
        ort_fail "$m: table $t's logits differ from table $(cat "$work/$m.simd.name")'s"
    else
      cp "$work/$m.$t.ours.bin" "$work/$m.simd.bin"
      echo "$t" >"$work/$m.simd.name"
    fi
  done
done

# The tied embeddings: the int8 numerics against ONNX Runtime's (8-bit head;
# the table's rows are the same on every kernel table, a scalar lookup), and
# with fp32 activations (--matmul-fp32) against accuracy_level 0 within a
# hundredth of the spread between ONNX Runtime's two numerics: the same fp32
# arithmetic, so every looked-up row must be ONNX Runtime's.
compare tiny-tie8 "$work/tiny-tie8" "$work/tiny-tie8"
for m in tiny-tie8 tiny-tie4 tiny-tie4s; do
  "$QWEN3D" generate --model "$work/$m" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" --max-tokens 33 \
    --matmul-fp32 --dump-logits "$work/$m.fp32.bin" >/dev/null || ort_fail "generate --matmul-fp32 failed on $m"
  ort_refs "$work/$m"
  ort_node compare-logits.js --label "$m fp32" --ours "$work/$m.fp32.bin" --ort "$work/$m.ort.bin" \
    --ort-fp32 "$work/$m.ort0.bin" --ref "$work/$m.ort0.bin" --factor 0.01 \
    --vocab "$(ort_json "$work/$m/genai_config.json" j.model.vocab_size)" ||
    ort_fail "$m: qwen3d's fp32 logits are not ONNX Runtime's accuracy_level 0 ones"
done

# The fused plan (plan rewrites: SiLU(gate)*up in one step, RMSNorm that
# quantizes the activations of the int8 projections reading it, the QKV
# projection writing the Split's three outputs itself) must give the same
# logits as the graph's own steps.
for m in tiny w06l4; do
  for f in "" --no-fusion; do
    "$QWEN3D" generate --model "$work/$m" --prompt-ids "$PROMPT" --teacher-ids "$TEACHER" --max-tokens 33 $f \
      --dump-logits "$work/$m.fusion$f.bin" >/dev/null || ort_fail "generate $f failed on $m"
  done
  cmp -s "$work/$m.fusion.bin" "$work/$m.fusion--no-fusion.bin" ||
    ort_fail "$m: the fused plan's logits differ from the unfused plan's"
  # Greedy decoding takes the argmax fused into the LM head; --no-fusion scans the row.
  for f in "" --no-fusion; do
    "$QWEN3D" generate --model "$work/$m" --prompt-ids "$PROMPT" --max-tokens 24 $f \
      --dump-logits "$work/$m.greedy$f.bin" >"$work/$m.greedy$f.txt" || ort_fail "greedy generate $f failed on $m"
  done
  cmp -s "$work/$m.greedy.txt" "$work/$m.greedy--no-fusion.txt" &&
    cmp -s "$work/$m.greedy.bin" "$work/$m.greedy--no-fusion.bin" ||
    ort_fail "$m: greedy ids or logits differ between the fused and the unfused plan"
done
"$QWEN3D" inspect --model "$work/tiny" | grep -q "SiLU(gate) \* up fused" ||
  ort_fail "inspect shows no fused SiLU(gate)*up step on the tiny model"
"$QWEN3D" inspect --model "$work/tiny" | grep -q "activations quantized by the norm" ||
  ort_fail "inspect shows no projection reading norm-quantized activations on the tiny model"
"$QWEN3D" inspect --model "$work/tiny" --no-fusion | grep -q "activations quantized by the norm" &&
  ort_fail "inspect --no-fusion still shows norm-quantized activations"
[ "$("$QWEN3D" inspect --model "$work/tiny" | grep -c "(Split fused: 3 outputs)")" = 2 ] ||
  ort_fail "inspect does not show both layers' QKV projections writing their Split's outputs on the tiny model"
"$QWEN3D" inspect --model "$work/tiny" --no-fusion | grep -q "Split fused" &&
  ort_fail "inspect --no-fusion still shows a fused Split"

# Greedy decoding: the same ids and bit-identical logits at 1 and 2 threads, twice.
for t in 1 2; do
  for r in a b; do
    "$QWEN3D" generate --model "$work/tiny" --prompt-ids "$PROMPT" --max-tokens 24 --threads $t \
      --dump-logits "$work/greedy.$t$r.bin" >"$work/greedy.$t$r.txt" || ort_fail "greedy run $t$r failed"
  done
done
for f in 1b 2a 2b; do
  cmp -s "$work/greedy.1a.txt" "$work/greedy.$f.txt" || ort_fail "greedy ids differ between runs 1a and $f"
  cmp -s "$work/greedy.1a.bin" "$work/greedy.$f.bin" || ort_fail "greedy logits differ between runs 1a and $f"
done
echo "greedy ids (1 and 2 threads, repeated): $(cat "$work/greedy.1a.txt")"
rm -rf "$work"
