'use strict';
// Creating CPU sessions in onnxruntime-node, and telling ORT's own refusals apart from the
// limits of the node binding.

const os = require('os');
const ort = require('onnxruntime-node');
const { ortTypeOf } = require('./tensor_proto');
const { readModel, typeToString } = require('./onnx_model');

// ORT's own log would repeat on stderr every error the harness already reports (and warnings
// like "Removing initializer ..." flood big runs).
ort.env.logLevel = 'fatal';

class HarnessError extends Error {
  // kind: 'load_error' (ORT refused the model) | 'unsupported' (the harness/binding can't do it)
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

function oneLine(err) {
  const msg = err && err.message !== undefined ? err.message : String(err);
  return msg.replace(/\s+/g, ' ').trim();
}

// session options: {level: 'disabled'|'basic'|'extended'|'all', threads, optimizedModelFilePath}
function sessionOptions(opts = {}) {
  const o = {
    executionProviders: ['cpu'],
    graphOptimizationLevel: opts.level || 'all',
    intraOpNumThreads: opts.threads || Math.max(1, os.availableParallelism()),
    interOpNumThreads: 1,
    logSeverityLevel: 4,
  };
  if (opts.optimizedModelFilePath) o.optimizedModelFilePath = opts.optimizedModelFilePath;
  return o;
}

// ONNXTensorElementDataType names the binding reports by number; from 24 on they differ from
// onnx's TensorProto.DataType numbering.
const ORT_ELEMENT_NAMES = {
  14: 'complex64', 15: 'complex128', 16: 'bfloat16', 17: 'float8e4m3fn', 18: 'float8e4m3fnuz',
  19: 'float8e5m2', 20: 'float8e5m2fnuz', 21: 'uint4', 22: 'int4', 23: 'float4e2m1',
  24: 'uint2', 25: 'int2', 26: 'float8e8m0',
};

// "input 'x' (tensor(bfloat16)[3]), output 'y' (...)": graph values the binding can't map.
function unfetchableValues(modelPath) {
  try {
    const { graph } = readModel(modelPath);
    const bad = (v) => v.type.kind === 'tensor' && !ortTypeOf(v.type.elemType);
    return [...graph.feedInputs.filter(bad).map((v) => `input '${v.name}' (${typeToString(v.type)})`),
      ...graph.outputs.filter(bad).map((v) => `output '${v.name}' (${typeToString(v.type)})`)].join(', ');
  } catch (err) {
    return '';
  }
}

// Resolves to an InferenceSession; rejects with a HarnessError.
async function createSession(model, opts = {}) {
  try {
    return await ort.InferenceSession.create(model, sessionOptions(opts));
  } catch (err) {
    // onnxruntime-node throws this in JS *after* ORT loaded the model, when an input/output has
    // an element type the binding does not map (bfloat16, float8, ...). ORT itself accepted it.
    const m = /^Unsupported data type: (\d+)$/.exec(err && err.message);
    if (m) {
      const what = typeof model === 'string' ? unfetchableValues(model) : '';
      throw new HarnessError('unsupported', `onnxruntime-node cannot feed/fetch ` +
        `${what || `ORT element type ${ORT_ELEMENT_NAMES[m[1]] || m[1]}`} (ORT itself loaded the model)`);
    }
    throw new HarnessError('load_error', oneLine(err));
  }
}

module.exports = { ort, createSession, sessionOptions, oneLine, HarnessError };
