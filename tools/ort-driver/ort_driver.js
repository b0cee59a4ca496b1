#!/usr/bin/env node
'use strict';
// onnx-rewrite's runtime driver for npm `onnxruntime-node` (protocol: README.md beside it).
//   node ort_driver.js JOB.json
// Runs each model of the job in ONNX Runtime (CPU, graph optimizations off: the model as
// written), fed the job's TensorProto files by name; writes each fetched output as a named
// TensorProto and, once a model is done, its result JSON. Compares nothing.

const fs = require('fs');
const path = require('path');

const RUNTIME = 'onnxruntime-node';

function writeResult(model, result) {
  fs.writeFileSync(model.result, JSON.stringify(result));
}

async function runModel(model, job, lib, version) {
  const result = { runtime: RUNTIME, version, status: 'ran', message: null, outputs: [], load_seconds: 0, run_seconds: 0 };
  let started = process.hrtime.bigint();
  const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
  let session;
  try {
    session = await lib.createSession(model.path, { level: 'disabled', threads: job.threads || undefined });
  } catch (err) {
    result.status = err.kind === 'unsupported' ? 'unsupported' : 'load-error';
    result.message = lib.oneLine(err);
    return result;
  }
  result.load_seconds = seconds();
  started = process.hrtime.bigint();
  try {
    const feeds = {};
    for (const input of model.inputs) {
      const tensor = lib.decodeTensor(fs.readFileSync(input.file));
      if (!tensor.type) {
        result.status = 'unsupported';
        result.message = `${RUNTIME} cannot feed input '${input.name}' (${lib.dataTypeName(tensor.dataType).toLowerCase()})`;
        return result;
      }
      feeds[input.name] = lib.toOrtTensor(tensor);
    }
    const fetched = await session.run(feeds, model.outputs);
    fs.mkdirSync(model.output_dir, { recursive: true });
    model.outputs.forEach((name, k) => {
      const file = path.join(model.output_dir, `${k}.pb`);
      fs.writeFileSync(file, lib.encodeTensor(lib.fromOrtTensor(fetched[name], name)));
      result.outputs.push({ name, file });
    });
  } catch (err) {
    result.status = 'run-error';
    result.message = lib.oneLine(err);
  } finally {
    result.run_seconds = seconds();
    await session.release();
  }
  return result;
}

async function main() {
  if (process.argv.length !== 3) {
    process.stderr.write('usage: node ort_driver.js JOB.json\n');
    process.exit(2);
  }
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const lib = {
    ...require('./lib/tensor_proto'),
    ...require('./lib/ort_session'),
  };
  for (const model of job.models) writeResult(model, await runModel(model, job, lib, lib.ort.env.versions.node));
}

main().catch((err) => {
  process.stderr.write(`ort_driver.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(2);
});
