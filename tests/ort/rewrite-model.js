#!/usr/bin/env node
// Writes a model folder's graph again "as a different ONNX writer would": the
// same computation, but with every node and value renamed (graph inputs and
// outputs keep the names genai_config.json fixes, not their order), another
// valid topological order, initializer names swapped among initializers,
// shuffled initializers and attributes, a differently named and laid out
// external data file (reversed tensor order, no alignment, not starting at 0)
// and a few small initializers inline. A loader that wires by graph structure
// must see no difference; one that leans on names, order or layout breaks.
//
// With --keep-layout the graph is written back unchanged apart from
// --set-accuracy-level, and the data file is hard-linked (or copied): that is
// how ORT is run at another MatMulNBits accuracy_level.
//
// Usage: rewrite-model.js --in DIR --out DIR [--seed N] [--names swap|opaque]
//                         [--data-name FILE] [--set-accuracy-level N] [--keep-layout]
'use strict';

const fs = require('fs');
const path = require('path');

const PROG = 'rewrite-model';

// Element sizes in bits by TensorProto.DataType; 4-bit types pack two per byte.
const DTYPE_BITS = {
  1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
  14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8,
};
const ATTR_TENSOR = 4, ATTR_GRAPH = 5, ATTR_TENSORS = 9, ATTR_GRAPHS = 10, ATTR_INT = 2;
const LOC_EXTERNAL = 1;
const INLINE_MAX_BYTES = 4096;
const INLINE_MAX_COUNT = 6;
const COPY_CHUNK = 8 << 20;

let onnxLoaded = null;

function loadOnnx() {
  // The generated decoders silently skip fields the bundled schema (ONNX 1.10)
  // does not know; re-encoding would then drop them. Count those skips so a
  // lossy rewrite fails instead of passing for the same graph.
  if (onnxLoaded) {
    onnxLoaded.unknown.clear();
    return onnxLoaded;
  }
  const onnx = require('onnx-proto').onnx;
  // The protobufjs runtime onnx-proto itself uses, wherever npm placed it.
  const pb = require(require.resolve('protobufjs/minimal', { paths: [path.dirname(require.resolve('onnx-proto'))] }));
  const stack = [];
  const unknown = new Map();
  const wrap = (obj, prefix) => {
    for (const [k, v] of Object.entries(obj)) {
      if (typeof v === 'function' && typeof v.decode === 'function' && !v.decode.__wrapped) {
        const orig = v.decode;
        const name = prefix + k;
        v.decode = function (r, l) {
          stack.push(name);
          try { return orig.call(this, r, l); } finally { stack.pop(); }
        };
        v.decode.__wrapped = true;
        wrap(v, name + '.');
      }
    }
  };
  wrap(onnx, '');
  const skip = pb.Reader.prototype.skipType;
  let depth = 0;
  pb.Reader.prototype.skipType = function (wt) {
    if (depth++ === 0) {
      const where = stack[stack.length - 1] || '?';
      unknown.set(where, (unknown.get(where) || 0) + 1);
    }
    try { return skip.call(this, wt); } finally { depth--; }
  };
  onnxLoaded = { onnx, unknown };
  return onnxLoaded;
}

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle(arr, rand) {
  for (let i = arr.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [arr[i], arr[j]] = [arr[j], arr[i]];
  }
  return arr;
}

const num = (x) => (typeof x === 'number' ? x : Number(String(x)));

function tensorBytes(t) {
  const bits = DTYPE_BITS[t.dataType];
  if (bits === undefined) return null;
  const n = (t.dims || []).reduce((a, d) => a * num(d), 1);
  return Math.ceil((n * bits) / 8);
}

function extInfo(t) {
  const kv = {};
  for (const e of t.externalData || []) kv[e.key] = e.value;
  return kv;
}

// Every TensorProto that carries data: initializers and Constant-style
// attribute tensors. Subgraphs would need scoped renaming; this graph form has none.
function dataTensors(graph) {
  const out = graph.initializer.map((t) => ({ t, where: `initializer "${t.name}"` }));
  for (const n of graph.node) {
    for (const a of n.attribute || []) {
      if (a.type === ATTR_GRAPH || a.type === ATTR_GRAPHS || a.g || (a.graphs && a.graphs.length)) {
        throw new Error(`node "${n.name}" (${n.opType}) has a subgraph attribute; not supported`);
      }
      if (a.t) out.push({ t: a.t, where: `node "${n.name}" attribute ${a.name}` });
      for (const t of a.tensors || []) out.push({ t, where: `node "${n.name}" attribute ${a.name}` });
    }
  }
  return out;
}

// Resolves and checks the external data of one tensor against its file.
function resolveExternal(dir, t, where, files) {
  const kv = extInfo(t);
  const loc = kv.location;
  if (!loc) throw new Error(`${where}: external data without a location`);
  if (path.isAbsolute(loc) || loc.split(/[\\/]/).includes('..')) {
    throw new Error(`${where}: external data location "${loc}" leaves the model folder`);
  }
  const file = path.join(dir, loc);
  if (!files.has(file)) {
    let fd;
    try {
      fd = fs.openSync(file, 'r');
    } catch (e) {
      throw new Error(`${where}: ${e.message}`);
    }
    files.set(file, { fd, size: fs.fstatSync(fd).size, loc });
  }
  const f = files.get(file);
  const offset = kv.offset === undefined ? 0 : Number(kv.offset);
  const length = kv.length === undefined ? f.size - offset : Number(kv.length);
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 ||
      offset + length > f.size) {
    throw new Error(`${where}: offset ${kv.offset} length ${kv.length} outside ${loc} (${f.size} bytes)`);
  }
  const want = tensorBytes(t);
  if (want !== null && want !== length) {
    throw new Error(`${where}: ${length} bytes in ${loc} but its shape needs ${want}`);
  }
  return { file, fd: f.fd, loc, offset, length };
}

function copyRange(srcFd, srcOff, dstFd, dstOff, length, buf) {
  let done = 0;
  while (done < length) {
    const n = Math.min(buf.length, length - done);
    let got = 0;
    while (got < n) {
      const r = fs.readSync(srcFd, buf, got, n - got, srcOff + done + got);
      if (r === 0) throw new Error('unexpected end of data file');
      got += r;
    }
    let put = 0;
    while (put < n) put += fs.writeSync(dstFd, buf, put, n - put, dstOff + done + put);
    done += n;
  }
}

function setAccuracyLevel(graph, level) {
  let count = 0;
  for (const n of graph.node) {
    if (n.opType !== 'MatMulNBits' || n.domain !== 'com.microsoft') continue;
    let a = (n.attribute || []).find((x) => x.name === 'accuracy_level');
    if (!a) {
      a = { name: 'accuracy_level', type: ATTR_INT };
      n.attribute.push(a);
    }
    a.type = ATTR_INT;
    a.i = level;
    count++;
  }
  return count;
}

// A random topological order: Kahn's algorithm picking any ready node.
function randomTopoOrder(graph, rand) {
  const avail = new Set(graph.input.map((v) => v.name));
  for (const t of graph.initializer) avail.add(t.name);
  const producer = new Map();
  graph.node.forEach((n, i) => n.output.forEach((o) => { if (o) producer.set(o, i); }));
  const waiting = graph.node.map(() => 0);
  const consumers = new Map();
  graph.node.forEach((n, i) => {
    for (const x of new Set(n.input.filter((s) => s && !avail.has(s)))) {
      if (!producer.has(x)) throw new Error(`node "${n.name}" (${n.opType}) reads "${x}", which nothing produces`);
      waiting[i]++;
      if (!consumers.has(x)) consumers.set(x, []);
      consumers.get(x).push(i);
    }
  });
  const ready = [];
  waiting.forEach((w, i) => { if (w === 0) ready.push(i); });
  const order = [];
  while (ready.length) {
    const k = Math.floor(rand() * ready.length);
    const i = ready[k];
    ready[k] = ready[ready.length - 1];
    ready.pop();
    order.push(i);
    for (const o of graph.node[i].output) {
      for (const c of consumers.get(o) || []) if (--waiting[c] === 0) ready.push(c);
    }
  }
  if (order.length !== graph.node.length) throw new Error('the graph has a cycle');
  return order;
}

function renameAll(graph, rand, mode) {
  const keep = new Set([...graph.input, ...graph.output].map((v) => v.name));
  const values = new Set();
  const add = (s) => { if (s && !keep.has(s)) values.add(s); };
  graph.initializer.forEach((t) => add(t.name));
  graph.node.forEach((n) => { n.input.forEach(add); n.output.forEach(add); });
  (graph.valueInfo || []).forEach((v) => add(v.name));

  const map = new Map();
  const taken = new Set(keep);
  if (mode === 'swap') {
    // Initializers take each other's names, so a loader that looks tensors
    // up by name gets a real tensor of the wrong role.
    const names = graph.initializer.map((t) => t.name).filter((s) => !keep.has(s));
    const perm = shuffle(names.slice(), rand);
    names.forEach((s, i) => { map.set(s, perm[i]); taken.add(perm[i]); });
  }
  let k = 0;
  const fresh = (prefix) => {
    let s;
    do s = `${prefix}${(k++).toString(36)}`; while (taken.has(s));
    taken.add(s);
    return s;
  };
  for (const s of shuffle([...values], rand)) if (!map.has(s)) map.set(s, fresh('_'));
  const r = (s) => (s && map.has(s) ? map.get(s) : s);

  graph.initializer.forEach((t) => { t.name = r(t.name); });
  (graph.valueInfo || []).forEach((v) => { v.name = r(v.name); });
  const nodeNames = graph.node.map((n) => n.name);
  const permNodes = mode === 'swap' ? shuffle(nodeNames.slice(), rand) : null;
  graph.node.forEach((n, i) => {
    n.input = n.input.map(r);
    n.output = n.output.map(r);
    n.name = permNodes && permNodes[i] ? permNodes[i] : fresh('node_');
  });
  return map.size;
}

function rewriteModel(opts) {
  const input = path.resolve(opts.input);
  const output = path.resolve(opts.output);
  if (input === output) throw new Error('--out must differ from --in');
  const say = opts.quiet ? () => {} : (m) => process.stderr.write(`${PROG}: ${m}\n`);
  const rand = mulberry32(opts.seed === undefined ? 1 : opts.seed);

  let modelFile = 'model.onnx';
  const cfgPath = path.join(input, 'genai_config.json');
  if (fs.existsSync(cfgPath)) {
    const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
    modelFile = (cfg.model && cfg.model.decoder && cfg.model.decoder.filename) || modelFile;
  }
  const { onnx, unknown } = loadOnnx();
  const srcModel = path.join(input, modelFile);
  const model = onnx.ModelProto.decode(fs.readFileSync(srcModel));
  if (unknown.size) {
    const list = [...unknown].map(([k, v]) => `${v} in ${k}`).join(', ');
    throw new Error(`${srcModel}: fields unknown to the onnx-proto schema would be lost (${list})`);
  }
  const graph = model.graph;
  if (!graph) throw new Error(`${srcModel}: no graph`);

  const tensors = dataTensors(graph);
  const files = new Map();
  const ext = tensors.filter(({ t }) => t.dataLocation === LOC_EXTERNAL)
    .map((x) => ({ ...x, src: resolveExternal(input, x.t, x.where, files) }));

  fs.mkdirSync(output, { recursive: true });
  let matmuls = null;
  if (opts.accuracyLevel !== undefined && opts.accuracyLevel !== null) {
    matmuls = setAccuracyLevel(graph, opts.accuracyLevel);
    if (matmuls === 0) throw new Error(`${srcModel}: no MatMulNBits node to set accuracy_level on`);
  }

  if (opts.keepLayout) {
    for (const f of files.values()) {
      const dst = path.join(output, f.loc);
      fs.mkdirSync(path.dirname(dst), { recursive: true });
      fs.rmSync(dst, { force: true });
      try {
        fs.linkSync(path.join(input, f.loc), dst);
      } catch {
        fs.copyFileSync(path.join(input, f.loc), dst);
      }
    }
  } else {
    const order = randomTopoOrder(graph, rand);
    const moved = order.filter((i, k) => i !== k).length;
    graph.node = order.map((i) => graph.node[i]);
    const renamed = renameAll(graph, rand, opts.names || 'swap');
    shuffle(graph.initializer, rand);
    shuffle(graph.valueInfo || [], rand);
    // Graph inputs and outputs are bound by name, so their order is free too.
    shuffle(graph.input, rand);
    shuffle(graph.output, rand);
    for (const n of graph.node) {
      // Trailing empty names are absent optional slots; a writer may omit them.
      while (n.input.length && n.input[n.input.length - 1] === '') n.input.pop();
      while (n.output.length && n.output[n.output.length - 1] === '') n.output.pop();
      n.attribute = (n.attribute || []).reverse();
      delete n.docString;
    }
    graph.name = 'g';
    delete graph.docString;
    model.opsetImport = (model.opsetImport || []).reverse();
    model.producerName = 'qwen3d-tests-rewrite';
    model.producerVersion = '1';

    // A few small tensors move into the protobuf as raw_data.
    const small = shuffle(ext.filter((x) => x.src.length <= INLINE_MAX_BYTES), rand)
      .slice(0, Math.min(INLINE_MAX_COUNT, Math.ceil(ext.length / 8)));
    const inline = new Set(small);
    for (const x of small) {
      const buf = Buffer.alloc(x.src.length);
      if (x.src.length) fs.readSync(x.src.fd, buf, 0, x.src.length, x.src.offset);
      x.t.rawData = buf;
      x.t.externalData = [];
      delete x.t.dataLocation;
    }

    // The rest go to a new file, last tensor of the old file first, packed
    // back to back after a few junk bytes so no offset is aligned by accident.
    const dataName = opts.dataName || `weights-${(opts.seed === undefined ? 1 : opts.seed)}.bin`;
    const rest = ext.filter((x) => !inline.has(x))
      .sort((a, b) => (a.src.file === b.src.file ? b.src.offset - a.src.offset : a.src.file < b.src.file ? 1 : -1));
    const dst = path.join(output, dataName);
    const dstFd = fs.openSync(dst, 'w');
    const gap = 1 + Math.floor(rand() * 7);
    fs.writeSync(dstFd, Buffer.alloc(gap, 0xee), 0, gap, 0);
    let off = gap;
    const buf = Buffer.allocUnsafe(COPY_CHUNK);
    for (const x of rest) {
      copyRange(x.src.fd, x.src.offset, dstFd, off, x.src.length, buf);
      const entries = [
        { key: 'location', value: dataName },
        { key: 'offset', value: String(off) },
        { key: 'length', value: String(x.src.length) },
      ];
      x.t.externalData = shuffle(entries, rand);
      x.t.dataLocation = LOC_EXTERNAL;
      off += x.src.length;
    }
    fs.closeSync(dstFd);
    say(`${graph.node.length} nodes (${moved} moved), ${renamed} values renamed, ` +
      `${graph.initializer.length} initializers (${small.length} inline), ${dataName} ${off} bytes`);
  }
  for (const f of files.values()) fs.closeSync(f.fd);
  if (matmuls !== null) say(`accuracy_level=${opts.accuracyLevel} on ${matmuls} MatMulNBits nodes`);

  fs.writeFileSync(path.join(output, modelFile), onnx.ModelProto.encode(model).finish());

  // Tokenizer and config files travel unchanged; the graph and its data do not.
  const skip = new Set([modelFile, ...[...files.values()].map((f) => f.loc)]);
  for (const e of fs.readdirSync(input, { withFileTypes: true })) {
    if (!e.isFile() || skip.has(e.name)) continue;
    fs.copyFileSync(path.join(input, e.name), path.join(output, e.name));
  }
}

function main() {
  const o = {};
  const argv = process.argv.slice(2);
  const int = (flag, s) => {
    if (!/^\d+$/.test(s || '')) throw new Error(`${flag}: "${s}" is not a non-negative integer`);
    return Number(s);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--in': o.input = val(); break;
      case '--out': o.output = val(); break;
      case '--seed': o.seed = int(a, val()); break;
      case '--names': o.names = val(); if (!['swap', 'opaque'].includes(o.names)) throw new Error(`--names: "${o.names}" is not swap or opaque`); break;
      case '--data-name': o.dataName = val(); if (o.dataName.includes('/') || o.dataName.startsWith('.')) throw new Error('--data-name: a plain file name, please'); break;
      case '--set-accuracy-level': o.accuracyLevel = int(a, val()); break;
      case '--keep-layout': o.keepLayout = true; break;
      default: throw new Error(`unknown argument "${a}"`);
    }
  }
  if (!o.input || !o.output) throw new Error('--in DIR and --out DIR are required');
  rewriteModel(o);
}

module.exports = { rewriteModel, loadOnnx, dataTensors, resolveExternal, LOC_EXTERNAL };

if (require.main === module) {
  try {
    main();
  } catch (e) {
    process.stderr.write(`${PROG}: ${String(e.message).replace(/\s*\n\s*/g, ' ')}\n`);
    process.exit(1);
  }
}
