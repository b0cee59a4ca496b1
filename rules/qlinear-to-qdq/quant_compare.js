#!/usr/bin/env node
'use strict';
// Runs two models in ONNX Runtime on the same seeded random inputs and measures how far B's
// outputs are from A's, in the units that matter for quantized tensors: for 8-bit (and other
// integer) outputs the difference in quantization steps (|a - b|, how many elements differ),
// for float outputs the absolute and relative error. It decides nothing: the caller (the C++
// test) holds the tolerance, so a test can also assert that a difference *is* there.
//
//   node quant_compare.js A.onnx B.onnx [--trials 3] [--seed 1] [--level disabled]
//        [--level-b disabled] [--float-range -4,4] [--range NAME=lo,hi ...]
//        [--shape NAME=d0,d1 ...] [--dim N=2 ...]
//
// Integer inputs are drawn from the whole range of their type (uint8 0..255, int8 -128..127)
// unless --range says otherwise; floats from --float-range. Prints one line per output of A:
//
//   output Y uint8 count 384 max_step 1 differing 2 max_abs 1 max_rel 0.0123 rel_to_max 0.004
//
// (max_rel over elements whose expected value is non-zero; rel_to_max = max |a - b| / max |a|),
// then `done`. Exit 0 when both models ran, 2 on a usage error or when ORT refuses or fails.

const path = require('path');
const lib = path.join(__dirname, '..', '..', 'tests', 'ort', 'lib');
const driverLib = path.join(__dirname, '..', '..', 'tools', 'ort-driver', 'lib');
const { parseArgs, parseRange, parseAssignment, runMain, UsageError } = require(path.join(lib, 'args'));

const USAGE = 'usage: node quant_compare.js A.onnx B.onnx [--trials 3] [--seed 1] [--level disabled] ' +
  '[--level-b LEVEL] [--float-range lo,hi] [--range NAME=lo,hi ...] [--shape NAME=d0,d1 ...] [--dim N=V ...]';

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
  });
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
  let sessA;
  let sessB;
  try {
    sessA = await createSession(fileA, { level: opts.level, threads: 1 });
  } catch (err) {
    process.stderr.write(`error: model A (${fileA}) failed to load in ONNX Runtime: ${err.message}\n`);
    return 2;
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
  const stats = new Map(outputs.map((n) => [n, { type: '', count: 0, maxStep: 0, differing: 0, maxAbs: 0, maxRel: 0, maxExp: 0 }]));
  const rng = tp.makeRng(opts.seed);
  for (let trial = 0; trial < opts.trials; trial++) {
    const feeds = {};
    for (const s of specs) feeds[s.name] = tp.toOrtTensor({ ...tp.randomTensor(s.type, s.dims, rng, s.ranges), name: s.name });
    let outA;
    let outB;
    try {
      outA = await sessA.run(feeds, outputs);
    } catch (err) {
      process.stderr.write(`error: model A failed to run: ${err.message}\n`);
      return 2;
    }
    try {
      const feedsB = Object.fromEntries(sessB.inputNames.map((n) => [n, feeds[n]]));
      outB = await sessB.run(feedsB, outputs);
    } catch (err) {
      process.stderr.write(`error: model B failed to run: ${err.message}\n`);
      return 2;
    }
    for (const name of outputs) {
      const a = tp.fromOrtTensor(outA[name], name);
      const b = tp.fromOrtTensor(outB[name], name);
      const st = stats.get(name);
      if (a.type !== b.type || a.dims.join(',') !== b.dims.join(',')) {
        process.stderr.write(`error: output ${name}: B gives ${b.type}[${b.dims}], A gives ${a.type}[${a.dims}]\n`);
        return 2;
      }
      st.type = a.type;
      const ea = tp.toNumbers(a);
      const eb = tp.toNumbers(b);
      for (let i = 0; i < ea.length; i++) {
        const d = Math.abs(Number(ea[i]) - Number(eb[i]));
        const e = Math.abs(Number(ea[i]));
        st.count++;
        st.maxExp = Math.max(st.maxExp, e);
        if (d !== d) { st.maxAbs = Infinity; st.differing++; continue; }
        if (d > 0) st.differing++;
        st.maxAbs = Math.max(st.maxAbs, d);
        st.maxStep = Math.max(st.maxStep, d);
        if (e > 0) st.maxRel = Math.max(st.maxRel, d / e);
      }
    }
  }
  for (const name of outputs) {
    const st = stats.get(name);
    const relToMax = st.maxExp > 0 ? st.maxAbs / st.maxExp : 0;
    process.stdout.write(`output ${name} ${st.type} count ${st.count} max_step ${st.maxStep} differing ${st.differing} ` +
      `max_abs ${st.maxAbs} max_rel ${st.maxRel} rel_to_max ${relToMax}\n`);
  }
  process.stdout.write('done\n');
  await sessA.release();
  await sessB.release();
  return 0;
}

runMain(USAGE, main);
