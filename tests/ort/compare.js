#!/usr/bin/env node
'use strict';
// Proves that model B (or a JS reference) computes what model A computes, on seeded random
// inputs built from A's graph inputs. Exit 0: all outputs within tolerance; 1: mismatch
// (values, shape, dtype or an output missing in B); 2: usage error or a model ORT can't load/run.

const fs = require('fs');
const path = require('path');
const { parseArgs, parseRange, parseAssignment, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/compare.js A.onnx (B.onnx | --reference MODULE.js [--params JSON]) ' +
  '[--dim N=2 ...] [--shape NAME=1,3,8,8 ...] [--seed 1] [--trials 3] [--rtol 1e-4] [--atol 1e-4] ' +
  '[--float-range -1,1] [--int-range 0,10] [--range NAME=lo,hi ...] [--level all] [--allow-nonfinite-expected] [--json]';

// Errors that end the run with exit 2 (not a usage problem: a model or reference failed).
class RunError extends Error {}

function parseDims(text, what) {
  const dims = text === '' ? [] : text.split(',').map((d) => Number(d.trim()));
  if (dims.some((d) => !Number.isInteger(d) || d < 0)) throw new UsageError(`${what}: expected comma-separated non-negative integers, got '${text}'`);
  return dims;
}

// Concrete input specs [{name, type, dims, ranges}] from A's graph inputs and the options.
function inputSpecs(graph, opts, tp, typeToString) {
  const dimValues = new Map();
  for (const a of opts.dim) {
    const [name, value] = parseAssignment(a, '--dim');
    const v = Number(value);
    if (!Number.isInteger(v) || v < 0) throw new UsageError(`--dim ${a}: value must be a non-negative integer`);
    dimValues.set(name, v);
  }
  const shapes = new Map(opts.shape.map((a) => {
    const [name, value] = parseAssignment(a, '--shape');
    return [name, parseDims(value, `--shape ${a}`)];
  }));
  const ranges = new Map(opts.range.map((a) => {
    const [name, value] = parseAssignment(a, '--range');
    return [name, parseRange(value, `--range ${a}`)];
  }));
  const names = new Set(graph.feedInputs.map((i) => i.name));
  for (const n of [...shapes.keys(), ...ranges.keys()]) {
    if (!names.has(n)) throw new UsageError(`'${n}' is not an input of A (inputs: ${[...names].join(', ') || 'none'})`);
  }

  const usedDims = new Set();
  const specs = graph.feedInputs.map((input) => {
    let t = input.type;
    if (t.kind === 'optional' && t.elem.kind === 'tensor') t = t.elem; // fed as a plain tensor
    if (t.kind !== 'tensor') throw new RunError(`A's input '${input.name}' is ${typeToString(input.type)}; compare.js feeds tensors only`);
    const type = tp.ortTypeOf(t.elemType);
    if (!type) throw new RunError(`A's input '${input.name}' is ${typeToString(t)}; onnxruntime-node cannot feed it`);
    let dims = shapes.get(input.name);
    if (!dims) {
      if (!t.shape) throw new UsageError(`input '${input.name}' has no shape in A: pass --shape ${input.name}=D0,D1,...`);
      dims = t.shape.map((d, i) => {
        if (typeof d === 'number') return d;
        if (typeof d === 'string' && d !== '') {
          if (!dimValues.has(d)) throw new UsageError(`input '${input.name}' dim ${i} is symbolic '${d}': pass --dim ${d}=VALUE (or --shape ${input.name}=...)`);
          usedDims.add(d);
          return dimValues.get(d);
        }
        throw new UsageError(`input '${input.name}' dim ${i} has no value or name: pass --shape ${input.name}=D0,D1,...`);
      });
    }
    const r = ranges.get(input.name);
    return { name: input.name, type, dims, ranges: { float: r || opts.floatRange, int: r || opts.intRange } };
  });
  for (const d of dimValues.keys()) {
    if (!usedDims.has(d)) throw new UsageError(`--dim ${d}: no input of A has a dimension named '${d}'`);
  }
  return specs;
}

function loadReference(spec) {
  const { registry } = require('./lib/naive');
  const file = path.resolve(spec);
  if (fs.existsSync(file)) {
    const fn = require(file);
    if (typeof fn !== 'function') throw new UsageError(`--reference ${spec}: module must export a function (inputs, params) => outputs`);
    return fn;
  }
  if (registry[spec]) return registry[spec];
  throw new UsageError(`--reference ${spec}: no such file, and not a registered naive reference (${Object.keys(registry).join(', ')})`);
}

// Reference outputs {name: {dims, data, type?}} -> harness tensors.
function referenceTensor(name, value, tp) {
  if (!value || !Array.isArray(value.dims) || !value.data) throw new RunError(`reference output '${name}' must be {dims: [...], data: TypedArray, type}`);
  let type = value.type;
  if (!type) {
    const el = Object.values(tp.ELEMENT).find((e) => e.Array && value.data instanceof e.Array && e.type !== 'bool' && e.type !== 'float16');
    if (!el) throw new RunError(`reference output '${name}': give its type`);
    type = el.type;
  }
  return { name, type, dataType: tp.dataTypeOf(type), dims: value.dims.map(Number), data: value.data };
}

function formatNumber(v) {
  return typeof v === 'number' ? v.toExponential(2) : String(v);
}

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), {
    dim: { type: 'string', multiple: true },
    shape: { type: 'string', multiple: true },
    range: { type: 'string', multiple: true },
    seed: { type: 'number', default: 1 },
    trials: { type: 'number', default: 3 },
    rtol: { type: 'number', default: 1e-4 },
    atol: { type: 'number', default: 1e-4 },
    'float-range': { type: 'string', default: '-1,1' },
    'int-range': { type: 'string', default: '0,10' },
    reference: { type: 'string' },
    params: { type: 'string' },
    level: { type: 'string', default: 'all' },
    'allow-nonfinite-expected': { type: 'bool' },
    json: { type: 'bool' },
  });
  const json = opts.json;
  const report = (obj) => {
    if (json) process.stdout.write(`${JSON.stringify(obj)}\n`);
  };

  // Usage checks that need no model.
  if (opts.reference ? positionals.length !== 1 : positionals.length !== 2) {
    throw new UsageError(opts.reference ? 'with --reference give only A.onnx' : 'expected A.onnx and B.onnx');
  }
  if (opts.params !== undefined && !opts.reference) throw new UsageError('--params needs --reference');
  if (!Number.isInteger(opts.trials) || opts.trials < 1) throw new UsageError('--trials must be a positive integer');
  if (!Number.isInteger(opts.seed)) throw new UsageError('--seed must be an integer');
  if (!['disabled', 'basic', 'extended', 'all'].includes(opts.level)) throw new UsageError(`--level: unknown level '${opts.level}'`);
  opts.floatRange = parseRange(opts['float-range'], '--float-range');
  opts.intRange = parseRange(opts['int-range'], '--int-range');
  let params = {};
  if (opts.params !== undefined) {
    try { params = JSON.parse(opts.params); } catch (err) { throw new UsageError(`--params: ${err.message}`); }
  }
  const reference = opts.reference ? loadReference(opts.reference) : null;
  const [fileA, fileB] = positionals;
  for (const f of positionals) if (!fs.existsSync(f)) throw new UsageError(`no such file: ${f}`);

  const tp = require('../../tools/ort-driver/lib/tensor_proto');
  const { readModel, typeToString, unusedInputs, placeholderInput } = require('../../tools/ort-driver/lib/onnx_model');
  const { compareTensors } = require('./lib/tensor_compare');
  const { createSession, oneLine } = require('../../tools/ort-driver/lib/ort_session');

  try {
    const open = async (file, label) => {
      try {
        return await createSession(file, { level: opts.level });
      } catch (err) {
        throw new RunError(`model ${label} (${file}) failed to load in ONNX Runtime: ${err.message}`);
      }
    };
    const sessA = await open(fileA, 'A');
    let graphA;
    try {
      graphA = readModel(fileA).graph;
    } catch (err) {
      throw new RunError(`cannot parse model A (${fileA}): ${err.message}`);
    }
    const specs = inputSpecs(graphA, opts, tp, typeToString);
    const sessB = fileB ? await open(fileB, 'B') : null;
    for (const o of graphA.outputs) {
      if (o.type.kind !== 'tensor' || !tp.ortTypeOf(o.type.elemType)) {
        throw new RunError(`A's output '${o.name}' is ${typeToString(o.type)}; onnxruntime-node cannot fetch it`);
      }
    }
    const outputNames = graphA.outputs.map((o) => o.name);
    // B may have inputs nothing reads (ORT leaves such when it optimizes IR < 4 models): they
    // get zeros. Any other input A lacks can't be fed.
    const placeholders = {};
    const fetchableB = new Set(); // fetching an int4 tensor would abort the process
    if (sessB) {
      const graphB = readModel(fileB).graph;
      for (const o of graphB.outputs) {
        if (o.type.kind === 'tensor' && tp.ortTypeOf(o.type.elemType)) fetchableB.add(o.name);
      }
      const unused = new Set(unusedInputs(graphB).map((i) => i.name));
      for (const inp of graphB.feedInputs) {
        if (specs.some((s) => s.name === inp.name)) continue;
        const zeros = unused.has(inp.name) && placeholderInput(inp);
        if (!zeros) throw new RunError(`B has an input A does not have: ${inp.name}`);
        placeholders[inp.name] = tp.toOrtTensor(zeros);
      }
    }

    const stats = new Map(outputNames.map((n) => [n, {
      name: n, shape: null, max_abs: 0, max_rel: 0, sum_abs: 0, elements: 0, nonfinite_expected: 0, nonfinite_got: 0, ok: true,
    }]));
    const tolerance = { rtol: opts.rtol, atol: opts.atol, allowNonfiniteExpected: opts['allow-nonfinite-expected'] };
    const rng = tp.makeRng(opts.seed);
    const run = async (sess, label, feeds, fetches) => {
      try {
        return await sess.run(feeds, fetches);
      } catch (err) {
        throw new RunError(`model ${label} failed to run in ONNX Runtime: ${oneLine(err)}`);
      }
    };

    for (let trial = 0; trial < opts.trials; trial++) {
      const inputs = specs.map((s) => ({ ...tp.randomTensor(s.type, s.dims, rng, s.ranges), name: s.name }));
      const feedsFor = (names) => Object.fromEntries(inputs.filter((t) => names.includes(t.name)).map((t) => [t.name, tp.toOrtTensor(t)]));
      const outA = await run(sessA, 'A', feedsFor(sessA.inputNames), outputNames);

      const outB = {};
      if (sessB) {
        const fetches = outputNames.filter((n) => fetchableB.has(n));
        if (fetches.length) {
          const res = await run(sessB, 'B', { ...feedsFor(sessB.inputNames), ...placeholders }, fetches);
          for (const n of fetches) outB[n] = tp.fromOrtTensor(res[n], n);
        }
      } else {
        const refInputs = Object.fromEntries(inputs.map((t) => [t.name, { dims: t.dims, data: t.data, type: t.type }]));
        let res;
        try {
          res = await reference(refInputs, params);
        } catch (err) {
          throw new RunError(`reference ${opts.reference} failed: ${err && err.stack ? err.stack : err}`);
        }
        for (const [n, v] of Object.entries(res || {})) outB[n] = referenceTensor(n, v, tp);
      }

      for (const name of outputNames) {
        const st = stats.get(name);
        const a = tp.fromOrtTensor(outA[name], name);
        st.shape = a.dims;
        const b = outB[name];
        if (!b) {
          const why = !sessB ? 'missing in the reference outputs'
            : sessB.outputNames.includes(name) ? 'B\'s output has a type onnxruntime-node cannot fetch' : 'missing in B';
          Object.assign(st, { ok: false, message: why });
          continue;
        }
        // The reference is the ground truth; between two models, A (the original) is.
        const c = reference ? compareTensors(b, a, tolerance) : compareTensors(a, b, tolerance);
        if (c.max_abs !== undefined) {
          st.max_abs = Math.max(st.max_abs, Number(c.max_abs));
          st.max_rel = Math.max(st.max_rel, Number(c.max_rel));
          st.sum_abs += c.sum_abs;
          st.elements += a.data.length;
          st.nonfinite_expected += c.nonfinite_expected;
          st.nonfinite_got += c.nonfinite_got;
        }
        if (!c.ok && st.ok) Object.assign(st, { ok: false, message: `trial ${trial}: ${c.message}` });
      }
    }

    const outputs = [...stats.values()];
    const ok = outputs.every((o) => o.ok);
    if (json) {
      report({ ok, trials: opts.trials, outputs: outputs.map(({ sum_abs, elements, ...o }) => ({ ...o, max_abs: jsonNum(o.max_abs), max_rel: jsonNum(o.max_rel),
        mean_abs: jsonNum(elements ? sum_abs / elements : 0) })) });
    } else {
      for (const o of outputs) {
        process.stdout.write(`${o.ok ? 'ok  ' : 'FAIL'} ${o.name} shape [${o.shape}] max_abs ${formatNumber(o.max_abs)} ` +
          `max_rel ${formatNumber(o.max_rel)} nonfinite expected ${o.nonfinite_expected} got ${o.nonfinite_got}` +
          `${o.message ? ` (${o.message})` : ''}\n`);
      }
      process.stdout.write(`${ok ? 'same' : 'DIFFERENT'}: ${outputs.length} output(s), ${opts.trials} trial(s), ` +
        `rtol ${opts.rtol}, atol ${opts.atol}\n`);
    }
    await sessA.release();
    if (sessB) await sessB.release();
    return ok ? 0 : 1;
  } catch (err) {
    if (!(err instanceof RunError) && !(json && err instanceof UsageError)) throw err;
    if (json) report({ ok: false, trials: opts.trials, outputs: [], error: err.message });
    process.stderr.write(`error: ${err.message}${err instanceof UsageError ? `; ${USAGE}` : ''}\n`);
    return 2;
  }
}

function jsonNum(v) {
  return Number.isFinite(v) ? v : String(v);
}

runMain(USAGE, main);
