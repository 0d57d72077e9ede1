#!/usr/bin/env node
// ONNX Runtime (CPU) as a peer for bench/run.sh: times one model and exchanges tensors with
// collage in the ONNX test-data layout (input_K.pb / output_K.pb, TensorProto files).
//
//   node bench/peers/ort_run.js MODEL.onnx [--threads 2] [--warmup 3] [--repeat 10]
//        [--inputs DIR | --write-inputs DIR] [--outputs DIR] [--compare DIR] [--seed N]
//
// --inputs DIR        read input_K.pb (graph-input order); otherwise random inputs like
//                     collage's (floats uniform in [-1,1), integers 0 or 1)
// --write-inputs DIR  write the inputs used as input_K.pb (for `collage run --inputs`)
// --outputs DIR       write the last run's outputs as output_K.pb
// --compare DIR       compare the outputs with DIR/output_K.pb: |a-b| <= rtol * max|b|
//                     per output (--rtol, default 1e-3)
// Prints one JSON line: {"median_ms","min_ms","samples":[...],"ort_version", "compare"?}.
//
//   node bench/peers/ort_run.js --compare-dirs WANT_DIR GOT_DIR [--rtol X]
//
// compares two folders of output_K.pb by the same rule, without ONNX Runtime, and prints the
// comparison's JSON ({"status","max_err_rel","outputs"}): bench/run.sh's check of how far a
// model's own outputs move under a tiny input change (bench/input_sensitivity.py).
// Session: intra-op threads = --threads, inter-op 1, sequential execution, all graph
// optimisations. Exit status 0 also on a mismatch (the JSON says so); 2 on bad arguments.
'use strict';
const fs = require('fs');
const path = require('path');

// ---- minimal protobuf TensorProto (onnx.proto): dims=1, data_type=2, name=8, raw_data=9;
// float_data=4, int32_data=5, int64_data=7 are read too. ONNX types: FLOAT=1, INT32=6,
// INT64=7, BOOL=9.
const ONNX_TYPES = {
  1: {ort: 'float32', array: Float32Array},
  6: {ort: 'int32', array: Int32Array},
  7: {ort: 'int64', array: BigInt64Array},
  9: {ort: 'bool', array: Uint8Array},
};
const ORT_TO_ONNX = {float32: 1, int32: 6, int64: 7, bool: 9};

function readVarint(buf, pos) {
  let result = 0n, shift = 0n;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    result |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
    shift += 7n;
  }
  return [result, pos];
}

function decodeTensor(buf) {
  const t = {dims: [], dataType: 0, name: '', raw: null, floats: [], ints: []};
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      let v;
      [v, pos] = readVarint(buf, pos);
      if (field === 1) t.dims.push(Number(BigInt.asIntN(64, v)));
      else if (field === 2) t.dataType = Number(v);
      else if (field === 5 || field === 7) t.ints.push(BigInt.asIntN(64, v));
    } else if (wire === 2) {
      let len;
      [len, pos] = readVarint(buf, pos);
      const end = pos + Number(len);
      if (end > buf.length) throw new Error('truncated field ' + field);
      const bytes = buf.subarray(pos, end);
      if (field === 1 || field === 5 || field === 7) {  // packed varints
        for (let p = 0; p < bytes.length;) {
          let v;
          [v, p] = readVarint(bytes, p);
          if (field === 1) t.dims.push(Number(BigInt.asIntN(64, v)));
          else t.ints.push(BigInt.asIntN(64, v));
        }
      } else if (field === 4) {  // packed floats
        const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        for (let p = 0; p + 4 <= bytes.length; p += 4) t.floats.push(dv.getFloat32(p, true));
      } else if (field === 8) {
        t.name = bytes.toString('utf8');
      } else if (field === 9) {
        t.raw = bytes;
      }
      pos = end;
    } else if (wire === 5) {
      if (field === 4) t.floats.push(buf.readFloatLE(pos));
      pos += 4;
    } else if (wire === 1) {
      pos += 8;
    } else {
      throw new Error('unsupported wire type ' + wire);
    }
  }
  const type = ONNX_TYPES[t.dataType];
  if (!type) throw new Error('unsupported TensorProto data_type ' + t.dataType);
  const numel = t.dims.reduce((a, b) => a * b, 1);
  let data;
  if (t.raw) {
    const copy = new Uint8Array(t.raw);  // aligned copy
    data = new type.array(copy.buffer, 0, copy.byteLength / type.array.BYTES_PER_ELEMENT);
  } else if (t.dataType === 1) {
    data = Float32Array.from(t.floats);
  } else if (t.dataType === 7) {
    data = BigInt64Array.from(t.ints);
  } else {
    data = type.array.from(t.ints, Number);
  }
  if (data.length !== numel)
    throw new Error(`tensor '${t.name}': ${data.length} elements for dims [${t.dims}]`);
  return {name: t.name, type: type.ort, dims: t.dims, data};
}

function varint(v) {  // non-negative values only (dims, tags, lengths)
  const out = [];
  let x = BigInt(v);
  do {
    let b = Number(x & 0x7fn);
    x >>= 7n;
    if (x > 0n) b |= 0x80;
    out.push(b);
  } while (x > 0n);
  return Buffer.from(out);
}

function encodeTensor(name, type, dims, data) {
  const dt = ORT_TO_ONNX[type];
  if (!dt) throw new Error('cannot write tensor type ' + type);
  const parts = [];
  for (const d of dims) parts.push(varint(1 << 3), varint(d));
  parts.push(varint(2 << 3), varint(dt));
  const nameBytes = Buffer.from(name, 'utf8');
  parts.push(varint((8 << 3) | 2), varint(nameBytes.length), nameBytes);
  const raw = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  parts.push(varint((9 << 3) | 2), varint(raw.length), raw);
  return Buffer.concat(parts);
}

// ---- arguments
function parseArgs(argv) {
  const o = {threads: 2, warmup: 3, repeat: 10, seed: 1, rtol: 1e-3};
  const positional = [];
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--threads' || a === '--warmup' || a === '--repeat' || a === '--seed') {
      const v = Number(value());
      if (!Number.isInteger(v) || v < 0) usage(`${a} expects a non-negative integer`);
      o[a.slice(2)] = v;
    } else if (a === '--rtol') {
      o.rtol = Number(value());
    } else if (a === '--inputs') {
      o.inputs = value();
    } else if (a === '--write-inputs') {
      o.writeInputs = value();
    } else if (a === '--outputs') {
      o.outputs = value();
    } else if (a === '--compare') {
      o.compare = value();
    } else if (a.startsWith('--')) {
      usage('unknown option ' + a);
    } else {
      positional.push(a);
    }
  }
  if (positional.length !== 1) usage('expected one MODEL.onnx');
  o.model = positional[0];
  return o;
}

function usage(msg) {
  process.stderr.write(`ort_run.js: ${msg}\nusage: node ort_run.js MODEL.onnx [--threads N] ` +
                       '[--warmup N] [--repeat N] [--inputs DIR | --write-inputs DIR] ' +
                       '[--outputs DIR] [--compare DIR] [--seed N] [--rtol X]\n');
  process.exit(2);
}

// ---- random inputs like collage's random_inputs (not the same stream, the same ranges)
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

function randomTensor(ort, meta, rng) {
  const dims = meta.shape.map((d) => {
    if (typeof d !== 'number' || d < 0)
      throw new Error(`input '${meta.name}' has a symbolic dim (${d}): pass --inputs DIR`);
    return d;
  });
  const n = dims.reduce((a, b) => a * b, 1);
  let data;
  switch (meta.type) {
    case 'float32': data = Float32Array.from({length: n}, () => rng() * 2 - 1); break;
    case 'int64': data = BigInt64Array.from({length: n}, () => BigInt(rng() < 0.5 ? 0 : 1)); break;
    case 'int32': data = Int32Array.from({length: n}, () => (rng() < 0.5 ? 0 : 1)); break;
    case 'bool': data = Uint8Array.from({length: n}, () => (rng() < 0.5 ? 0 : 1)); break;
    default: throw new Error(`input '${meta.name}': unsupported type ${meta.type}`);
  }
  return new ort.Tensor(meta.type, data, dims);
}

// `gots[k]` ({dims, data}) against `dir`/output_K.pb: max |got - want| over max |want| (over
// 1 for an all-zero output) per output, NaN matching only NaN; a mismatch past `rtol`.
function compareOutputs(names, gots, dir, rtol) {
  const report = {status: 'ok', max_err_rel: 0, outputs: []};
  names.forEach((name, k) => {
    const file = path.join(dir, `output_${k}.pb`);
    const got = gots[k];
    const want = decodeTensor(fs.readFileSync(file));
    const entry = {name, max_abs_err: 0, scale: 0};
    const sameShape = want.dims.length === got.dims.length &&
                      want.dims.every((d, i) => d === Number(got.dims[i]));
    if (!sameShape) {
      entry.error = `shape [${got.dims}] vs [${want.dims}]`;
      report.status = 'mismatch';
    } else {
      const a = got.data, b = want.data;
      for (let i = 0; i < b.length; ++i) entry.scale = Math.max(entry.scale, Math.abs(Number(b[i])));
      for (let i = 0; i < b.length; ++i) {
        const x = Number(a[i]), y = Number(b[i]);
        if (Number.isNaN(x) && Number.isNaN(y)) continue;
        const e = Math.abs(x - y);
        if (!(e <= entry.max_abs_err)) entry.max_abs_err = Number.isNaN(e) ? Infinity : e;
      }
      const rel = entry.max_abs_err / (entry.scale || 1);
      report.max_err_rel = Math.max(report.max_err_rel, rel);
      if (!(rel <= rtol)) report.status = 'mismatch';
    }
    report.outputs.push(entry);
  });
  return report;
}

// output_K.pb of `dir`, in K order.
function outputFiles(dir) {
  return fs.readdirSync(dir)
      .filter((f) => /^output_\d+\.pb$/.test(f))
      .sort((a, b) => Number(a.slice(7, -3)) - Number(b.slice(7, -3)));
}

function compareDirs(argv) {
  let rtol = 1e-3;
  const dirs = [];
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--rtol' && i + 1 < argv.length) {
      rtol = Number(argv[++i]);
    } else {
      dirs.push(argv[i]);
    }
  }
  if (dirs.length !== 2) usage('--compare-dirs expects WANT_DIR GOT_DIR');
  const [wantDir, gotDir] = dirs;
  const files = outputFiles(wantDir);
  if (!files.length || files.join() !== outputFiles(gotDir).join())
    throw new Error(`${wantDir} and ${gotDir} hold different outputs`);
  const gots = files.map((f) => decodeTensor(fs.readFileSync(path.join(gotDir, f))));
  const report = compareOutputs(gots.map((t) => t.name), gots, wantDir, rtol);
  process.stdout.write(JSON.stringify(report) + '\n');
}

async function main() {
  if (process.argv[2] === '--compare-dirs') return compareDirs(process.argv.slice(3));
  const o = parseArgs(process.argv.slice(2));
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(o.model, {
    intraOpNumThreads: o.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    executionProviders: ['cpu'],
  });
  const rng = mulberry32(o.seed);
  const feeds = {};
  session.inputNames.forEach((name, k) => {
    if (o.inputs) {
      const t = decodeTensor(fs.readFileSync(path.join(o.inputs, `input_${k}.pb`)));
      feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    } else {
      const meta = session.inputMetadata.find((m) => m.name === name) ||
                   session.inputMetadata[k];
      feeds[name] = randomTensor(ort, {...meta, name}, rng);
    }
  });
  if (o.writeInputs) {
    fs.mkdirSync(o.writeInputs, {recursive: true});
    session.inputNames.forEach((name, k) => {
      const t = feeds[name];
      fs.writeFileSync(path.join(o.writeInputs, `input_${k}.pb`),
                       encodeTensor(name, t.type, t.dims, t.data));
    });
  }
  for (let i = 0; i < o.warmup; ++i) await session.run(feeds);
  const samples = [];
  let outputs = null;
  for (let i = 0; i < o.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    outputs = await session.run(feeds);
    samples.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  if (!outputs && (o.outputs || o.compare)) outputs = await session.run(feeds);
  if (o.outputs) {
    fs.mkdirSync(o.outputs, {recursive: true});
    session.outputNames.forEach((name, k) => {
      const t = outputs[name];
      fs.writeFileSync(path.join(o.outputs, `output_${k}.pb`),
                       encodeTensor(name, t.type, t.dims.map(Number), t.data));
    });
  }
  const sorted = [...samples].sort((a, b) => a - b);
  const result = {
    median_ms: sorted.length ? sorted[Math.floor(sorted.length / 2)] : null,
    min_ms: sorted.length ? sorted[0] : null,
    samples,
    ort_version: require('onnxruntime-node/package.json').version,
    threads: o.threads,
  };
  if (o.compare) {
    result.compare = compareOutputs(session.outputNames,
                                    session.outputNames.map((name) => outputs[name]), o.compare,
                                    o.rtol);
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_run.js: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
