#!/usr/bin/env node
'use strict';
// Runs ONNX backend conformance cases in ONNX Runtime (CPU) and checks the expected outputs.
// The parent process hands jobs to a few long-lived worker processes (forks of this script):
// ORT starts once per worker, and a case that hangs or crashes the native code (fetching an
// int4 output aborts the process, for one) only costs that worker, which is replaced.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { fork } = require('child_process');
const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/conformance.js --jobs JOBS.json [--out RESULTS.json] ' +
  '[--rtol 1e-3] [--atol 1e-7] [--workers N] [--timeout SECONDS] [--level all]';

const STATUSES = ['pass', 'mismatch', 'load_error', 'run_error', 'unsupported'];

// ---- worker side ------------------------------------------------------------------------------

function listDataSets(dir) {
  const sets = fs.readdirSync(dir)
    .map((f) => /^test_data_set_(\d+)$/.exec(f))
    .filter(Boolean)
    .sort((a, b) => Number(a[1]) - Number(b[1]))
    .map((m) => path.join(dir, m[0]));
  return sets.map((setDir) => {
    const count = (prefix) => {
      let n = 0;
      while (fs.existsSync(path.join(setDir, `${prefix}_${n}.pb`))) n++;
      return n;
    };
    return { dir: setDir, inputs: count('input'), outputs: count('output') };
  });
}

// A light/ case is named by its model file (light_X.onnx) or stem (light_X); the rest are dirs.
function caseLayout(casePath) {
  const stem = casePath.endsWith('.onnx') ? casePath.slice(0, -5) : casePath;
  if (fs.existsSync(`${stem}_output_0.pb`) && fs.existsSync(`${stem}.onnx`)) {
    return { kind: 'light', model: `${stem}.onnx`, expected: `${stem}_output_0.pb` };
  }
  return { kind: 'standard', model: path.join(casePath, 'model.onnx') };
}

// Loaded lazily so that the parent process never starts ORT.
function libs() {
  return {
    tp: require('../../tools/ort-driver/lib/tensor_proto'),
    ...require('../../tools/ort-driver/lib/onnx_model'),
    ...require('./lib/tensor_compare'),
    ...require('../../tools/ort-driver/lib/ort_session'),
  };
}

// Ends a case early with a status other than pass: thrown by the steps below.
class CaseFailure extends Error {
  constructor(status, message, details = {}) {
    super(message);
    Object.assign(this, { status, details });
  }
}

function describe(v) {
  return `'${v.name}' (${libs().typeToString(v.type)})`;
}

// Outputs the binding can't fetch must be caught before running: fetching an int4/uint4 tensor
// aborts the whole process in onnxruntime-node 1.30.
function checkOutputsFetchable(graph) {
  const { tp } = libs();
  for (const o of graph.outputs) {
    if (o.type.kind !== 'tensor') throw new CaseFailure('unsupported', `output ${describe(o)} is not a tensor`);
    if (!tp.ortTypeOf(o.type.elemType)) {
      throw new CaseFailure('unsupported', `output ${describe(o)}: onnxruntime-node cannot fetch this element type`);
    }
  }
}

// input_K.pb is a TensorProto, or an OptionalProto for optional(tensor) graph inputs.
function readInput(file, input) {
  const { tp } = libs();
  const bytes = fs.readFileSync(file);
  let t;
  if (input.type.kind === 'tensor') {
    t = tp.decodeTensor(bytes);
  } else if (input.type.kind === 'optional' && input.type.elem.kind === 'tensor') {
    t = tp.decodeOptional(bytes).value;
    if (!t) throw new CaseFailure('unsupported', `input ${describe(input)} is an empty optional; onnxruntime-node cannot feed None`);
  } else {
    throw new CaseFailure('unsupported', `input ${describe(input)}: onnxruntime-node feeds tensors only`);
  }
  if (!t.type) throw new CaseFailure('unsupported', `input ${describe(input)}: onnxruntime-node cannot feed ${tp.dataTypeName(t.dataType)}`);
  return t;
}

// input_K.pb goes to the K-th graph input that is not an initializer. When the data set has
// fewer files than that, and exactly as many as the inputs something reads, those get them
// and the unused ones (see unusedInputs) get placeholders.
function inputFiles(ds, graph) {
  const { unusedInputs, placeholderInput } = libs();
  if (ds.inputs === graph.feedInputs.length) return graph.feedInputs.map((inp, k) => k);
  const unused = new Set(unusedInputs(graph));
  if (unused.size && ds.inputs === graph.feedInputs.length - unused.size &&
      [...unused].every((inp) => placeholderInput(inp))) {
    let k = 0;
    return graph.feedInputs.map((inp) => (unused.has(inp) ? null : k++));
  }
  throw new CaseFailure('run_error', `${path.basename(ds.dir)} has ${ds.inputs} inputs, the model takes ${graph.feedInputs.length}`);
}

// [{inputs: [tensor], outputs: [tensor]}] in graph input/output order.
function readDataSets(casePath, graph) {
  const { tp, oneLine, placeholderInput } = libs();
  const dataSets = listDataSets(casePath);
  if (!dataSets.length) throw new CaseFailure('unsupported', 'case has no test_data_set_N folder');
  return dataSets.map((ds) => {
    const where = path.basename(ds.dir);
    const files = inputFiles(ds, graph);
    if (ds.outputs !== graph.outputs.length) {
      throw new CaseFailure('mismatch', `${where} has ${ds.outputs} expected outputs, the model has ${graph.outputs.length}`);
    }
    try {
      return {
        inputs: graph.feedInputs.map((inp, i) => (files[i] === null ? placeholderInput(inp)
          : readInput(path.join(ds.dir, `input_${files[i]}.pb`), inp))),
        outputs: graph.outputs.map((o, k) => tp.decodeTensor(fs.readFileSync(path.join(ds.dir, `output_${k}.pb`)))),
      };
    } catch (err) {
      if (err instanceof CaseFailure) throw err;
      throw new CaseFailure('unsupported', `${where}: ${oneLine(err)}`);
    }
  });
}

// onnx's own light-model test feeds arange(N).reshape(shape) / N as float32, and checks output 0.
function lightDataSet(layout, graph) {
  const { tp } = libs();
  const { unusedInputs, placeholderInput } = libs();
  const unused = new Set(unusedInputs(graph));
  const used = graph.feedInputs.filter((inp) => !unused.has(inp));
  const shape = used.length === 1 && used[0].type.kind === 'tensor' ? used[0].type.shape : null;
  if (!shape || shape.some((d) => typeof d !== 'number') || ![...unused].every((inp) => placeholderInput(inp))) {
    throw new CaseFailure('unsupported', 'light case needs exactly one input with a static shape');
  }
  const n = tp.elementCount(shape);
  const data = Float32Array.from({ length: n }, (_, i) => i / n);
  const x = { name: used[0].name, dataType: tp.DataType.FLOAT, type: 'float32', dims: shape, data };
  const inputs = graph.feedInputs.map((inp) => (unused.has(inp) ? placeholderInput(inp) : x));
  return [{ inputs, outputs: [tp.decodeTensor(fs.readFileSync(layout.expected))] }];
}

async function runDataSets(session, graph, dataSets, tolerance) {
  const { tp, oneLine, compareTensors } = libs();
  for (let s = 0; s < dataSets.length; s++) {
    const ds = dataSets[s];
    const feeds = {};
    graph.feedInputs.forEach((inp, k) => { feeds[inp.name] = tp.toOrtTensor(ds.inputs[k]); });
    let results;
    try {
      results = await session.run(feeds);
    } catch (err) {
      throw new CaseFailure('run_error', oneLine(err), { data_set: s });
    }
    for (let k = 0; k < ds.outputs.length; k++) {
      const name = graph.outputs[k].name;
      const { ok, message, ...details } = compareTensors(ds.outputs[k], tp.fromOrtTensor(results[name], name), tolerance);
      if (!ok) {
        throw new CaseFailure('mismatch', `output '${name}': ${message}`, { data_set: s, output: name, output_index: k, ...details });
      }
    }
  }
}

async function runJob(job, opts) {
  const { createSession, readModel, oneLine, HarnessError } = libs();
  const layout = caseLayout(job.case);
  const modelPath = job.model || layout.model;
  const tolerance = {
    rtol: job.rtol !== undefined ? job.rtol : opts.rtol,
    atol: job.atol !== undefined ? job.atol : opts.atol,
    // ONNX's own expected outputs, some entirely infinite by definition (a reduction over an
    // empty set: test_reduce_min_empty_set, test_reduce_log_sum_exp_empty_set).
    allowNonfiniteExpected: true,
  };

  let session;
  try {
    session = await createSession(modelPath, { threads: opts.threads, level: opts.level });
  } catch (err) {
    return { status: err instanceof HarnessError ? err.kind : 'load_error', message: oneLine(err) };
  }
  try {
    let graph;
    try {
      graph = readModel(modelPath).graph;
    } catch (err) {
      throw new CaseFailure('unsupported', `harness could not parse the model: ${oneLine(err)}`);
    }
    checkOutputsFetchable(graph);
    const dataSets = layout.kind === 'light' ? lightDataSet(layout, graph) : readDataSets(job.case, graph);
    await runDataSets(session, graph, dataSets, tolerance);
    return { status: 'pass', data_sets: dataSets.length };
  } catch (err) {
    if (!(err instanceof CaseFailure)) throw err;
    return { status: err.status, message: err.message, ...err.details };
  } finally {
    await session.release().catch(() => {});
  }
}

function workerMain() {
  process.on('message', async ({ index, job, opts }) => {
    const t0 = process.hrtime.bigint();
    let result;
    try {
      result = await runJob(job, opts);
    } catch (err) {
      result = { status: 'run_error', message: `harness error: ${err && err.stack ? err.stack : err}` };
    }
    result.ms = Number((process.hrtime.bigint() - t0) / 1000000n);
    process.send({ index, result });
  });
  process.on('disconnect', () => process.exit(0));
}

// ---- parent side ------------------------------------------------------------------------------

function readJobs(file) {
  let jobs;
  try {
    jobs = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`--jobs ${file}: ${err.message}`);
  }
  if (!Array.isArray(jobs)) throw new UsageError(`--jobs ${file}: expected a JSON array`);
  jobs.forEach((j, i) => {
    if (!j || typeof j.case !== 'string') throw new UsageError(`--jobs: job ${i} has no "case" string`);
    if (j.model !== undefined && typeof j.model !== 'string') throw new UsageError(`--jobs: job ${i}: "model" must be a string`);
    const layout = caseLayout(j.case);
    if (layout.kind === 'standard' && !fs.existsSync(j.case)) throw new UsageError(`--jobs: job ${i}: case not found: ${j.case}`);
  });
  return jobs;
}

function runAll(jobs, opts, workerCount, timeoutMs) {
  return new Promise((resolve) => {
    const results = new Array(jobs.length);
    let next = 0;
    let done = 0;
    if (!jobs.length) { resolve(results); return; }

    const finish = (w, result) => {
      clearTimeout(w.timer);
      results[w.index] = { case: jobs[w.index].case, model: jobs[w.index].model || caseLayout(jobs[w.index].case).model, ...result };
      w.index = null;
      done++;
      if (done === jobs.length) resolve(results);
    };

    const dispatch = (w) => {
      if (next >= jobs.length) {
        w.child.disconnect();
        return;
      }
      w.index = next++;
      w.timer = setTimeout(() => { w.timedOut = true; w.child.kill('SIGKILL'); }, timeoutMs);
      w.child.send({ index: w.index, job: jobs[w.index], opts });
    };

    const spawn = () => {
      const w = { child: null, index: null, timer: null, timedOut: false };
      // Worker stdout goes to our stderr: our stdout may carry the results.
      w.child = fork(__filename, ['--worker'], { stdio: ['ignore', 2, 2, 'ipc'] });
      w.child.on('message', ({ index, result }) => {
        if (index !== w.index) return;
        finish(w, result);
        dispatch(w);
      });
      w.child.on('exit', (code, signal) => {
        if (w.index === null) return;
        const message = w.timedOut
          ? `timeout: no result after ${timeoutMs / 1000} s`
          : `harness worker died (${signal || `exit code ${code}`}) while running this case`;
        finish(w, { status: 'run_error', message });
        if (next < jobs.length) dispatch(spawn());
      });
      return w;
    };

    for (let i = 0; i < Math.min(workerCount, jobs.length); i++) dispatch(spawn());
  });
}

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), {
    jobs: { type: 'string' },
    out: { type: 'string' },
    rtol: { type: 'number', default: 1e-3 },
    atol: { type: 'number', default: 1e-7 },
    workers: { type: 'number', default: Math.min(2, os.availableParallelism()) },
    timeout: { type: 'number', default: 300 },
    level: { type: 'string', default: 'all' },
  });
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (!opts.jobs) throw new UsageError('--jobs is required');
  if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new UsageError('--workers must be a positive integer');
  if (!(opts.timeout > 0)) throw new UsageError('--timeout must be positive');
  if (!['disabled', 'basic', 'extended', 'all'].includes(opts.level)) throw new UsageError(`--level: unknown level '${opts.level}'`);
  const jobs = readJobs(opts.jobs);

  const t0 = Date.now();
  const threads = Math.max(1, Math.floor(os.availableParallelism() / opts.workers));
  const results = await runAll(jobs, { rtol: opts.rtol, atol: opts.atol, threads, level: opts.level },
    opts.workers, opts.timeout * 1000);
  const json = `${JSON.stringify(results, null, 1)}\n`;
  if (opts.out) fs.writeFileSync(opts.out, json);
  else process.stdout.write(json);

  const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
  for (const r of results) counts[r.status]++;
  const seconds = ((Date.now() - t0) / 1000).toFixed(1);
  process.stderr.write(`conformance: ${jobs.length} cases: ${STATUSES.map((s) => `${counts[s]} ${s}`).join(', ')} (${seconds} s)\n`);
  return 0;
}

if (process.argv[2] === '--worker') workerMain();
else runMain(USAGE, main);
