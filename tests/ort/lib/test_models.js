'use strict';
// Tiny hand-built models for the harness's own tests (and handy for others' tests).

const { buildModel } = require('../../../tools/ort-driver/lib/onnx_model');
const { DataType } = require('../../../tools/ort-driver/lib/tensor_proto');

const { FLOAT, INT64, FLOAT16, BOOL } = DataType;

const scalar = (name, value) => ({ name, dataType: FLOAT, dims: [], data: Float32Array.of(value) });

// C = A + B, A: float[N,3], B: float[3]. `offset` adds a constant to break equivalence;
// `unusedInput` adds an input Z nothing reads (like ORT's optimized IR < 4 models have).
function addModel({ offset = 0, op = 'Add', unusedInput = false } = {}) {
  const nodes = [{ op, inputs: ['A', 'B'], outputs: [offset ? 'S' : 'C'] }];
  const initializers = [];
  if (offset) {
    nodes.push({ op: 'Add', inputs: ['S', 'off'], outputs: ['C'] });
    initializers.push(scalar('off', offset));
  }
  return buildModel({
    inputs: [{ name: 'A', elemType: FLOAT, shape: ['N', 3] }, { name: 'B', elemType: FLOAT, shape: [3] },
      ...(unusedInput ? [{ name: 'Z', elemType: INT64, shape: ['K', 2] }] : [])],
    outputs: [{ name: 'C', elemType: FLOAT, shape: ['N', 3] }],
    nodes,
    initializers,
  });
}

// GELU spelled out as x * 0.5 * (1 + erf(x / sqrt(2))): ORT's extended level fuses it into
// com.microsoft Gelu.
function spelledGeluModel() {
  return buildModel({
    inputs: [{ name: 'x', elemType: FLOAT, shape: [2, 8] }],
    outputs: [{ name: 'y', elemType: FLOAT, shape: [2, 8] }],
    initializers: [scalar('sqrt2', Math.SQRT2), scalar('one', 1), scalar('half', 0.5)],
    nodes: [
      { op: 'Div', inputs: ['x', 'sqrt2'], outputs: ['d'] },
      { op: 'Erf', inputs: ['d'], outputs: ['e'] },
      { op: 'Add', inputs: ['e', 'one'], outputs: ['p'] },
      { op: 'Mul', inputs: ['x', 'p'], outputs: ['m'] },
      { op: 'Mul', inputs: ['m', 'half'], outputs: ['y'] },
    ],
  });
}

// Two outputs of other dtypes: n = i + 1 (int64) and h = Cast<float16>(f).
function mixedTypesModel() {
  return buildModel({
    inputs: [{ name: 'i', elemType: INT64, shape: [4] }, { name: 'f', elemType: FLOAT, shape: [2, 2] }],
    outputs: [{ name: 'n', elemType: INT64, shape: [4] }, { name: 'h', elemType: FLOAT16, shape: [2, 2] }],
    initializers: [{ name: 'one', dataType: INT64, dims: [], data: BigInt64Array.of(1n) }],
    nodes: [
      { op: 'Add', inputs: ['i', 'one'], outputs: ['n'] },
      { op: 'Cast', inputs: ['f'], outputs: ['h'], attrs: { to: FLOAT16 } },
    ],
  });
}

// A model ORT must refuse.
function unknownOpModel() {
  return buildModel({
    inputs: [{ name: 'x', elemType: FLOAT, shape: [1] }],
    outputs: [{ name: 'y', elemType: FLOAT, shape: [1] }],
    nodes: [{ op: 'NoSuchOp', inputs: ['x'], outputs: ['y'] }],
  });
}

// y = x + 1 repeated 10^12 times by a Loop: runs "forever", for timeout tests.
function endlessLoopModel() {
  const body = {
    name: 'body',
    inputs: [{ name: 'iter', elemType: INT64, shape: [] }, { name: 'cond', elemType: BOOL, shape: [] },
      { name: 'x', elemType: FLOAT, shape: [1] }],
    outputs: [{ name: 'cond_out', elemType: BOOL, shape: [] }, { name: 'x_out', elemType: FLOAT, shape: [1] }],
    initializers: [scalar('one', 1)],
    nodes: [
      { op: 'Identity', inputs: ['cond'], outputs: ['cond_out'] },
      { op: 'Add', inputs: ['x', 'one'], outputs: ['x_out'] },
    ],
  };
  return buildModel({
    inputs: [{ name: 'x', elemType: FLOAT, shape: [1] }],
    outputs: [{ name: 'y', elemType: FLOAT, shape: [1] }],
    initializers: [
      { name: 'trips', dataType: INT64, dims: [], data: BigInt64Array.of(10n ** 12n) },
      { name: 'go', dataType: BOOL, dims: [], data: Uint8Array.of(1) },
    ],
    nodes: [{ op: 'Loop', inputs: ['trips', 'go', 'x'], outputs: ['y'], attrs: { body } }],
  });
}

module.exports = { addModel, spelledGeluModel, mixedTypesModel, unknownOpModel, endlessLoopModel };
