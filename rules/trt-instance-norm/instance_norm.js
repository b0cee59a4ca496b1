'use strict';
// Naive reference of instance normalization (the TRTInstanceNormalization / MMCVInstanceNormalization
// TensorRT plugins, = ONNX InstanceNormalization), in plain loops and float64:
//
//   for each sample n and channel c:
//     mean, var = mean and population variance of x[n, c, every position]
//     y[n, c, i] = scale[c] * (x[n, c, i] - mean) / sqrt(var + epsilon) + bias[c]
//
// params: x, scale, bias, output (names; defaults 'x', 'scale', 'bias', 'y'), epsilon (default 1e-5).

module.exports = (inputs, params) => {
  const x = inputs[params.x || 'x'];
  const scale = inputs[params.scale || 'scale'].data;
  const bias = inputs[params.bias || 'bias'].data;
  const epsilon = params.epsilon === undefined ? 1e-5 : params.epsilon;
  const [n, c] = x.dims;
  const size = x.dims.slice(2).reduce((a, b) => a * b, 1);
  const y = new Float32Array(x.data.length);
  for (let i = 0; i < n; ++i) {
    for (let j = 0; j < c; ++j) {
      const base = (i * c + j) * size;
      let mean = 0;
      for (let k = 0; k < size; ++k) mean += x.data[base + k];
      mean /= size;
      let variance = 0;
      for (let k = 0; k < size; ++k) variance += (x.data[base + k] - mean) ** 2;
      variance /= size;
      const inv = 1 / Math.sqrt(variance + epsilon);
      for (let k = 0; k < size; ++k) y[base + k] = scale[j] * (x.data[base + k] - mean) * inv + bias[j];
    }
  }
  return { [params.output || 'y']: { dims: x.dims, data: y } };
};
