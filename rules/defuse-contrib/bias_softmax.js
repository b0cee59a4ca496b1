'use strict';
// Reference for com.microsoft BiasSoftmax (CUDA/ROCm kernel; no CPU kernel to compare against):
// softmax(data + bias) over the dims from `axis` on, normalized jointly, bias indexed as ORT's own
// test computes it (onnxruntime/test/contrib_ops/bias_softmax_op_test.cc, ComputeInternal):
// right-aligned, a bias dim that differs from data's is broadcast. Plain loops, double sums.
// params: {data, bias, output: names; axis (default 1)}.

module.exports = function biasSoftmax(inputs, params = {}) {
  const { data: dataName = 'data', bias: biasName = 'bias', output = 'y', axis: rawAxis = 1 } = params;
  const data = inputs[dataName];
  const bias = inputs[biasName];
  if (!data || !bias) throw new Error(`bias_softmax: needs inputs '${dataName}' and '${biasName}'`);
  const dims = data.dims;
  const rank = dims.length;
  const axis = rawAxis < 0 ? rawAxis + rank : rawAxis;
  const offset = rank - bias.dims.length;

  // Strides of data, and of bias along data's dims (0 where bias broadcasts).
  const strides = new Array(rank).fill(1);
  const biasStrides = new Array(rank).fill(0);
  let biasStride = 1;
  for (let i = rank - 1; i >= 0; i--) {
    if (i < rank - 1) strides[i] = strides[i + 1] * dims[i + 1];
    if (i >= offset) {
      const d = bias.dims[i - offset];
      biasStrides[i] = d === dims[i] ? biasStride : 0;
      biasStride *= d;
    }
  }

  const total = dims.reduce((a, b) => a * b, 1);
  const sum = new Float64Array(total);
  for (let i = 0; i < total; i++) {
    let remain = i;
    let b = 0;
    for (let j = 0; j < rank; j++) {
      const q = Math.floor(remain / strides[j]);
      b += q * biasStrides[j];
      remain %= strides[j];
    }
    sum[i] = data.data[i] + bias.data[b];
  }

  const group = dims.slice(axis).reduce((a, b) => a * b, 1);
  const out = new Float32Array(total);
  for (let start = 0; start < total; start += group) {
    let max = -Infinity;
    for (let k = 0; k < group; k++) max = Math.max(max, sum[start + k]);
    let norm = 0;
    for (let k = 0; k < group; k++) norm += Math.exp(sum[start + k] - max);
    for (let k = 0; k < group; k++) out[start + k] = Math.exp(sum[start + k] - max) / norm;
  }
  return { [output]: { dims: [...dims], data: out, type: 'float32' } };
};
