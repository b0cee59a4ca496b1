#!/usr/bin/env node
'use strict';
// Measures how far model B's outputs are from the expected ones on the same seeded random
// inputs, in the units that matter for quantized tensors: for 8-bit (and other integer) outputs
// the difference in quantization steps (|a - b|, how many elements differ), for float outputs
// the absolute and relative error. The expected outputs are model A's run in ONNX Runtime, or,
// with --reference, A's nodes evaluated by naive JS references (qlinear_reference.js: exact
// integer math, the same on every CPU; A is not run). It decides nothing: the caller (the C++
// test) holds the tolerance, so a test can also assert that a difference *is* there.
//
//   node quant_compare.js A.onnx B.onnx [--reference OPS.js ...] [--kernel] [--trials 3]
//        [--seed 1] [--level disabled] [--level-b disabled] [--float-range -4,4]
//        [--range NAME=lo,hi ...] [--shape NAME=d0,d1 ...] [--dim N=2 ...]
//
// Integer inputs are drawn from the whole range of their type (uint8 0..255, int8 -128..127)
// unless --range says otherwise; floats from --float-range. Prints one line per output of A:
//
//   output Y uint8 count 384 max_step 1 differing 2 max_abs 1 max_rel 0.0123 rel_to_max 0.004
//          nonfinite_expected 0 nonfinite_got 0 nonfinite_where_finite 0
//
// (max_rel over elements whose expected value is non-zero; rel_to_max = max |a - b| / max |a|;
// nonfinite_where_finite counts elements that are NaN/Inf in B but finite in the expected), then
// `done`. With --reference and --kernel, A's com.microsoft kernels (ORT, optimizations off) are
// measured against the reference too, but only where they are exact on this CPU: first on a
// probe (every input at the ends of its range, where MLAS's u8s8 kernels saturate int16 pair
// sums without VNNI), then a random draw of another seed; float outputs count as exact within
// --kernel-rtol (1e-6) of their largest value. An output whose probe differs prints
// `kernel NAME inexact on this CPU ...`, and then no output of the kernels is compared (one
// downstream of an inexact kernel may pass the probe and differ elsewhere); else every output
// prints `kernel NAME TYPE count ... max_step ... differing ...` over the trials.
// Exit 0 when everything ran, 2 on a usage error or when ORT refuses or fails.

const path = require('path');
const lib = path.join(__dirname, '..', '..', 'tests', 'ort', 'lib');
const driverLib = path.join(__dirname, '..', '..', 'tools', 'ort-driver', 'lib');
const { parseArgs, parseRange, parseAssignment, runMain, UsageError } = require(path.join(lib, 'args'));

const USAGE = 'usage: node quant_compare.js A.onnx B.onnx [--trials 3] [--seed 1] [--level disabled] ' +
  '[--level-b LEVEL] [--reference OPS.js ...] [--kernel] [--kernel-rtol 1e-6] [--float-range lo,hi] [--range NAME=lo,hi ...] ' +
  '[--shape NAME=d0,d1 ...] [--dim N=V ...]';

const FULL_RANGE = {
  uint8: [0, 255], int8: [-128, 127], uint16: [0, 65535], int16: [-32768, 32767], int32: [-1000, 1000],
};

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), {
    trials: { type: 'number', default: 3 },
    seed: { type: 'number', default: 1 },
    level: { type: 'string', default: 'disabled' },
    'level-b': { type: 'string' },
    'float-range': { type: 'string', default: '-4,4' },
    range: { type: 'string', multiple: true },
    shape: { type: 'string', multiple: true },
    dim: { type: 'string', multiple: true },
    reference: { type: 'string', multiple: true },
    kernel: { type: 'bool' },
    'kernel-rtol': { type: 'number', default: 1e-6 },
  });
  if (opts.kernel && !opts.reference.length) throw new UsageError('--kernel needs --reference');
  if (positionals.length !== 2) throw new UsageError('expected A.onnx and B.onnx');
  const tp = require(path.join(driverLib, 'tensor_proto'));
  const { readModel } = require(path.join(driverLib, 'onnx_model'));
  const { createSession } = require(path.join(driverLib, 'ort_session'));

  const floatRange = parseRange(opts['float-range'], '--float-range');
  const ranges = new Map(opts.range.map((a) => {
    const [name, value] = parseAssignment(a, '--range');
    return [name, parseRange(value, `--range ${a}`)];
  }));
  const shapes = new Map(opts.shape.map((a) => {
    const [name, value] = parseAssignment(a, '--shape');
    return [name, value === '' ? [] : value.split(',').map(Number)];
  }));
  const dims = new Map(opts.dim.map((a) => {
    const [name, value] = parseAssignment(a, '--dim');
    return [name, Number(value)];
  }));

  const [fileA, fileB] = positionals;
  const fs = require('fs');
  const references = opts.reference.map((f) => require(path.resolve(f)));
  const ops = Object.assign({}, ...references);
  const qm = require('./quant_math');
  const refGraph = references.length ? qm.readGraph(fs.readFileSync(fileA)) : null;
  let sessA = null;
  let sessB;
  if (!refGraph || opts.kernel) {
    try {
      sessA = await createSession(fileA, { level: opts.level, threads: 1 });
    } catch (err) {
      process.stderr.write(`error: model A (${fileA}) failed to load in ONNX Runtime: ${err.message}\n`);
      return 2;
    }
  }
  try {
    sessB = await createSession(fileB, { level: opts['level-b'] || opts.level, threads: 1 });
  } catch (err) {
    process.stderr.write(`error: model B (${fileB}) failed to load in ONNX Runtime: ${err.message}\n`);
    return 2;
  }
  const graph = readModel(fileA).graph;
  const specs = graph.feedInputs.map((input) => {
    const type = tp.ortTypeOf(input.type.elemType);
    if (!type) throw new UsageError(`input '${input.name}' has a type onnxruntime-node cannot feed`);
    const shape = shapes.get(input.name) || (input.type.shape || []).map((d, i) => {
      if (typeof d === 'number') return d;
      if (dims.has(d)) return dims.get(d);
      throw new UsageError(`input '${input.name}' dim ${i} is not a number: pass --shape or --dim`);
    });
    const range = ranges.get(input.name);
    return { name: input.name, type, dims: shape, ranges: { float: range || floatRange, int: range || FULL_RANGE[type] || [0, 10] } };
  });
  const outputs = graph.outputs.map((o) => o.name);
  const newStats = () => new Map(outputs.map((n) => [n, {
    type: '', count: 0, maxStep: 0, differing: 0, maxAbs: 0, maxRel: 0, maxExp: 0, nonfiniteExp: 0, nonfiniteGot: 0, nonfiniteWhereFinite: 0,
  }]));
  const stats = newStats();

  // Expected outputs: the reference evaluation of A, or A run in ORT.
  const expected = async (sess, feedsData) => {
    if (sess) {
      const feeds = Object.fromEntries(sess.inputNames.map((n) => [n, tp.toOrtTensor(feedsData[n])]));
      const res = await sess.run(feeds, outputs);
      return Object.fromEntries(outputs.map((n) => [n, tp.fromOrtTensor(res[n], n)]));
    }
    const values = qm.evaluate(refGraph, ops, feedsData);
    return Object.fromEntries(outputs.map((n) => [n, values.get(n)]));
  };
  const runB = async (sess, feedsData) => {
    const feeds = Object.fromEntries(sess.inputNames.map((n) => [n, tp.toOrtTensor(feedsData[n])]));
    const res = await sess.run(feeds, outputs);
    return Object.fromEntries(outputs.map((n) => [n, tp.fromOrtTensor(res[n], n)]));
  };
  // Accumulates |a - b| of every output into st (a: expected). Returns an error text or ''.
  const measure = (outA, outB, into) => {
    for (const name of outputs) {
      const a = outA[name];
      const b = outB[name];
      const st = into.get(name);
      if (!a || !b) return `output ${name} missing`;
      if (a.type !== b.type || a.dims.join(',') !== b.dims.join(',')) {
        return `output ${name}: got ${b.type}[${b.dims}], expected ${a.type}[${a.dims}]`;
      }
      st.type = a.type;
      const ea = a.data;
      const eb = b.data;
      for (let i = 0; i < ea.length; i++) {
        const x = Number(ea[i]);
        const y = Number(eb[i]);
        const e = Math.abs(x);
        st.count++;
        if (Number.isFinite(e)) st.maxExp = Math.max(st.maxExp, e);
        if (!Number.isFinite(x)) st.nonfiniteExp++;
        if (!Number.isFinite(y)) {
          st.nonfiniteGot++;
          if (Number.isFinite(x)) st.nonfiniteWhereFinite++;
        }
        if (x === y || (x !== x && y !== y)) continue; // equal (the same infinity), or both NaN
        const d = Math.abs(x - y);
        st.differing++;
        if (!(d === d) || !Number.isFinite(d)) { st.maxAbs = Infinity; st.maxStep = Infinity; continue; }
        st.maxAbs = Math.max(st.maxAbs, d);
        st.maxStep = Math.max(st.maxStep, d);
        if (e > 0) st.maxRel = Math.max(st.maxRel, d / e);
      }
    }
    return '';
  };
  const line = (prefix, name, st) => {
    const relToMax = st.maxExp > 0 ? st.maxAbs / st.maxExp : 0;
    return `${prefix} ${name} ${st.type} count ${st.count} max_step ${st.maxStep} differing ${st.differing} ` +
      `max_abs ${st.maxAbs} max_rel ${st.maxRel} rel_to_max ${relToMax} nonfinite_expected ${st.nonfiniteExp} ` +
      `nonfinite_got ${st.nonfiniteGot} nonfinite_where_finite ${st.nonfiniteWhereFinite}\n`;
  };

  // The kernel probe, two inputs the trials don't use: every input at one end of its range
  // (chosen at random per element), then a random draw from another seed. Exact means: integer
  // outputs identical, float outputs within --kernel-rtol of the largest value.
  let kernelStats = null;
  if (refGraph && opts.kernel) {
    const prng = tp.makeRng(opts.seed + 7919);
    const probe = newStats();
    for (const ends of [true, false]) {
      const feeds = {};
      for (const s of specs) {
        const t = tp.randomTensor(s.type, s.dims, prng, s.ranges);
        const [lo, hi] = s.type === 'float32' ? s.ranges.float : s.ranges.int;
        if (ends) for (let i = 0; i < t.data.length; i++) t.data[i] = prng() < 0.5 ? lo : hi;
        feeds[s.name] = { ...t, name: s.name };
      }
      let error;
      try {
        error = measure(await expected(null, feeds), await expected(sessA, feeds), probe);
      } catch (err) {
        process.stderr.write(`error: model A or its reference failed on the probe: ${err.message}\n`);
        return 2;
      }
      if (error) {
        process.stderr.write(`error: kernel probe: ${error}\n`);
        return 2;
      }
    }
    const inexact = [...probe.entries()].filter(([, st]) => (st.type === 'float32'
      ? st.nonfiniteWhereFinite > 0 || (st.maxExp > 0 ? st.maxAbs / st.maxExp : st.maxAbs) > opts['kernel-rtol']
      : st.differing > 0));
    for (const [name, st] of inexact) {
      process.stdout.write(`kernel ${name} inexact on this CPU: probe max_step ${st.maxStep} differing ${st.differing} of ${st.count}` +
        ` rel_to_max ${st.maxExp > 0 ? st.maxAbs / st.maxExp : st.maxAbs}; ORT's kernel is not compared\n`);
    }
    // All or nothing: in a graph of several kernels an output downstream of an inexact one can
    // pass the probe and still differ on other inputs.
    if (!inexact.length) kernelStats = newStats();
  }

  const rng = tp.makeRng(opts.seed);
  for (let trial = 0; trial < opts.trials; trial++) {
    const feeds = {};
    for (const s of specs) feeds[s.name] = { ...tp.randomTensor(s.type, s.dims, rng, s.ranges), name: s.name };
    let outA;
    let outB;
    try {
      outA = await expected(refGraph ? null : sessA, feeds);
    } catch (err) {
      process.stderr.write(`error: ${refGraph ? 'the reference of A' : 'model A'} failed to run: ${err.message}\n`);
      return 2;
    }
    try {
      outB = await runB(sessB, feeds);
    } catch (err) {
      process.stderr.write(`error: model B failed to run: ${err.message}\n`);
      return 2;
    }
    const error = measure(outA, outB, stats);
    if (error) {
      process.stderr.write(`error: ${error}\n`);
      return 2;
    }
    if (kernelStats) {
      let outK;
      try {
        outK = await expected(sessA, feeds);
      } catch (err) {
        process.stderr.write(`error: model A failed to run: ${err.message}\n`);
        return 2;
      }
      const kerr = measure(outA, outK, kernelStats);
      if (kerr) {
        process.stderr.write(`error: kernel: ${kerr}\n`);
        return 2;
      }
    }
  }
  for (const name of outputs) process.stdout.write(line('output', name, stats.get(name)));
  if (kernelStats) for (const name of outputs) process.stdout.write(line('kernel', name, kernelStats.get(name)));
  process.stdout.write('done\n');
  if (sessA) await sessA.release();
  await sessB.release();
  return 0;
}

runMain(USAGE, main);
