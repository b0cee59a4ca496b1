'use strict';
// Reference for ONNX Add (numpy broadcasting), the example of the naive-reference contract.
// params: {a: input name, b: input name, output: output name}; defaults 'A', 'B', 'C'.

const { broadcastShape, broadcastIndex, forEachIndex } = require('./broadcast');

module.exports = function add(inputs, params = {}) {
  const { a = 'A', b = 'B', output = 'C' } = params;
  const x = inputs[a];
  const y = inputs[b];
  if (!x || !y) throw new Error(`add: needs inputs '${a}' and '${b}' (got ${Object.keys(inputs).join(', ')})`);
  if (x.type !== y.type) throw new Error(`add: input types differ (${x.type}, ${y.type})`);
  if (x.type === 'float16' || x.type === 'string' || x.type === 'bool') throw new Error(`add: ${x.type} not supported`);
  const dims = broadcastShape(x.dims, y.dims);
  const data = new x.data.constructor(dims.reduce((n, d) => n * d, 1));
  forEachIndex(dims, (at, k) => {
    data[k] = x.data[broadcastIndex(at, x.dims)] + y.data[broadcastIndex(at, y.dims)];
  });
  return { [output]: { dims, data, type: x.type } };
};
