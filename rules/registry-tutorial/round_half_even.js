'use strict';
// Naive reference of torch.round / ONNX Round (= the registry tutorial's CustomOpTwo): round to
// the nearest integer, halves to the even neighbour (0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0).
//
// params: x (input name, default 'x'), output (default 'z'), scale (default 1: round x * scale,
// e.g. 0.5 to make halves out of integers, 2 for the tutorial's round(x + x)), outputType
// ('float32' default, or 'int32' as ONNX Runtime's CustomOpTwo kernel declares it), halves
// ('even' default; 'away' rounds halves away from zero, as C's round() does: to show a test
// tells the two apart).

function roundHalfEven(v) {
  const floor = Math.floor(v);
  const fraction = v - floor;
  if (fraction < 0.5) return floor;
  if (fraction > 0.5) return floor + 1;
  return floor % 2 === 0 ? floor : floor + 1;
}

function roundHalfAway(v) {
  return Math.sign(v) * Math.floor(Math.abs(v) + 0.5);
}

module.exports = function roundReference(inputs, params = {}) {
  const { x: xName = 'x', output = 'z', scale = 1, outputType = 'float32', halves = 'even' } = params;
  const x = inputs[xName];
  if (!x) throw new Error(`round_half_even: no input '${xName}'`);
  const round = halves === 'away' ? roundHalfAway : roundHalfEven;
  const data = outputType === 'int32' ? new Int32Array(x.data.length) : new Float32Array(x.data.length);
  for (let i = 0; i < data.length; i++) data[i] = round(Number(x.data[i]) * scale);
  return { [output]: { dims: x.dims.slice(), data, type: outputType } };
};
