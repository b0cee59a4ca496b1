'use strict';
// Naive reference of torch.nn.functional.group_norm (= the mygroupnorm tutorial op, = ONNX
// GroupNormalization-21), in plain loops and float64:
//
//   for each sample n and group g (channels g*C/G .. (g+1)*C/G - 1):
//     mean, var = mean and biased variance of x[n, channels of g, every spatial position]
//     y[n, c, ...] = (x[n, c, ...] - mean) / sqrt(var + epsilon) * scale[c] + bias[c]
//
// With perGroup (ONNX GroupNormalization-18), scale and bias are indexed by group instead.
//
// params: x (input name, default 'x'), output (default 'y'), numGroups (a number, or the name of
// a one-element input), scale and bias (arrays, or input names; default all 1 / all 0),
// epsilon (default 1e-5), perGroup (default false).

function valuesOf(inputs, spec, what) {
  if (Array.isArray(spec)) return spec;
  const tensor = inputs[spec];
  if (!tensor) throw new Error(`group_norm: ${what} '${spec}' is not an input (got ${Object.keys(inputs).join(', ')})`);
  return Array.from(tensor.data, Number);
}

module.exports = function groupNorm(inputs, params = {}) {
  const { x: xName = 'x', output = 'y', epsilon = 1e-5, perGroup = false } = params;
  const x = inputs[xName];
  if (!x) throw new Error(`group_norm: no input '${xName}'`);
  if (x.dims.length < 2) throw new Error(`group_norm: x has rank ${x.dims.length}`);
  const groups = typeof params.numGroups === 'number' ? params.numGroups : valuesOf(inputs, params.numGroups, 'numGroups')[0];
  const [batch, channels] = x.dims;
  if (!Number.isInteger(groups) || groups < 1 || channels % groups !== 0) {
    throw new Error(`group_norm: ${channels} channels don't split into ${groups} groups`);
  }
  const affineLength = perGroup ? groups : channels;
  const scale = params.scale === undefined ? new Array(affineLength).fill(1) : valuesOf(inputs, params.scale, 'scale');
  const bias = params.bias === undefined ? new Array(affineLength).fill(0) : valuesOf(inputs, params.bias, 'bias');
  if (scale.length !== affineLength || bias.length !== affineLength) {
    throw new Error(`group_norm: scale/bias need ${affineLength} values, got ${scale.length}/${bias.length}`);
  }

  const spatial = x.dims.slice(2).reduce((n, d) => n * d, 1);
  const perGroupChannels = channels / groups;
  const groupSize = perGroupChannels * spatial;
  const data = new x.data.constructor(x.data.length);
  for (let n = 0; n < batch; n++) {
    for (let g = 0; g < groups; g++) {
      const start = (n * channels + g * perGroupChannels) * spatial;  // a group's elements are contiguous
      let sum = 0;
      for (let i = 0; i < groupSize; i++) sum += x.data[start + i];
      const mean = sum / groupSize;
      let squares = 0;
      for (let i = 0; i < groupSize; i++) squares += (x.data[start + i] - mean) ** 2;
      const invStd = 1 / Math.sqrt(squares / groupSize + epsilon);
      for (let i = 0; i < groupSize; i++) {
        const c = g * perGroupChannels + Math.floor(i / spatial);
        const k = perGroup ? g : c;
        data[start + i] = (x.data[start + i] - mean) * invStd * scale[k] + bias[k];
      }
    }
  }
  return { [output]: { dims: x.dims.slice(), data, type: x.type } };
};
