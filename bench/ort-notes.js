// The conditions under which ONNX Runtime ran in bench/ort-bench.js, as the
// sentences compare-ort.js and report.js print under their tables: how its
// time to first token and its decode steps differ in work from qwen3d's.
'use strict';

// kv: 'contract' | 'share'; logits: 'all' | 'last' (ort-bench.js --kv, --logits).
function ortConditions(kv, logits) {
  const lines = [];
  if (logits === 'last')
    lines.push('Time to first token: both runtimes compute the logits of the last prompt position only ' +
      '(ONNX Runtime runs a copy of the graph with a Slice in front of the LM head).');
  else
    lines.push('Time to first token: ONNX Runtime runs the graph as exported, whose LM head computes the logits ' +
      'of every prompt position (prompt length x vocabulary), while qwen3d computes the last position\'s only; ' +
      '--ort-logits last gives ONNX Runtime the same work.');
  if (kv === 'share')
    lines.push('Decode: ONNX Runtime appends each step\'s keys and values in place to one preallocated buffer per ' +
      'layer bound as both past and present (GroupQueryAttention\'s shared past/present buffer), but ' +
      'onnxruntime-node 1.30 copies every fetched output, these whole buffers included, into new JavaScript ' +
      'memory after each step; qwen3d appends to its cache in place and copies no past.');
  else
    lines.push('Decode: ONNX Runtime follows the graph\'s past/present contract: at every step GroupQueryAttention ' +
      'copies the whole past into a new present, which onnxruntime-node copies into new JavaScript memory and the ' +
      'next step takes as its past, so the cost grows with the context; qwen3d appends to its cache in place and ' +
      'copies no past (--ort-kv share removes ONNX Runtime\'s own copy).');
  return lines;
}

module.exports = { ortConditions };
