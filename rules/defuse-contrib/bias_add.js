'use strict';
// Reference for com.microsoft BiasAdd (CUDA kernel; no CPU kernel to compare against):
// Y[n, s, c] = X[n, s, c] + bias[c] + skip[n, s, c]. Plain loops.
// params: {x, bias, skip, output: names}.

module.exports = function biasAdd(inputs, params = {}) {
  const { x: xName = 'x', bias: biasName = 'bias', skip: skipName = 'skip', output = 'y' } = params;
  const x = inputs[xName];
  const bias = inputs[biasName];
  const skip = inputs[skipName];
  if (!x || !bias || !skip) throw new Error(`bias_add: needs inputs '${xName}', '${biasName}', '${skipName}'`);
  const channels = bias.dims[0];
  if (x.dims[x.dims.length - 1] !== channels || skip.data.length !== x.data.length) {
    throw new Error(`bias_add: X [${x.dims}], bias [${bias.dims}], skip [${skip.dims}] don't fit`);
  }
  const out = new Float32Array(x.data.length);
  for (let i = 0; i < out.length; i++) out[i] = x.data[i] + bias.data[i % channels] + skip.data[i];
  return { [output]: { dims: [...x.dims], data: out, type: 'float32' } };
};
