'use strict';
// Naive reference of torch.inverse / torch.linalg.inv (= com.microsoft Inverse): the inverse of
// every [M, M] matrix in the last two dims of x, by Gauss-Jordan elimination with partial
// pivoting in float64.
//
// params: x (input name, default 'x'), output (default 'y'), shift (default 0): invert
// x + shift * I instead (the test models add shift * I first, to stay well conditioned).

function invert(a, m) {
  const w = a.slice();  // row-major working copy
  const inv = new Float64Array(m * m);
  for (let i = 0; i < m; i++) inv[i * m + i] = 1;
  for (let col = 0; col < m; col++) {
    let pivot = col;
    for (let r = col + 1; r < m; r++) if (Math.abs(w[r * m + col]) > Math.abs(w[pivot * m + col])) pivot = r;
    if (w[pivot * m + col] === 0) throw new Error('matrix_inverse: singular matrix');
    for (let k = 0; k < m; k++) {
      [w[col * m + k], w[pivot * m + k]] = [w[pivot * m + k], w[col * m + k]];
      [inv[col * m + k], inv[pivot * m + k]] = [inv[pivot * m + k], inv[col * m + k]];
    }
    const p = w[col * m + col];
    for (let k = 0; k < m; k++) {
      w[col * m + k] /= p;
      inv[col * m + k] /= p;
    }
    for (let r = 0; r < m; r++) {
      if (r === col) continue;
      const f = w[r * m + col];
      for (let k = 0; k < m; k++) {
        w[r * m + k] -= f * w[col * m + k];
        inv[r * m + k] -= f * inv[col * m + k];
      }
    }
  }
  return inv;
}

module.exports = function matrixInverse(inputs, params = {}) {
  const { x: xName = 'x', output = 'y', shift = 0 } = params;
  const x = inputs[xName];
  if (!x) throw new Error(`matrix_inverse: no input '${xName}'`);
  const m = x.dims[x.dims.length - 1];
  if (x.dims.length < 2 || x.dims[x.dims.length - 2] !== m) throw new Error(`matrix_inverse: x is [${x.dims}], not [..., M, M]`);
  const data = new x.data.constructor(x.data.length);
  for (let start = 0; start < data.length; start += m * m) {
    const a = Array.from(x.data.subarray(start, start + m * m), Number);
    for (let i = 0; i < m; i++) a[i * m + i] += shift;
    data.set(invert(a, m), start);
  }
  return { [output]: { dims: x.dims.slice(), data, type: x.type } };
};
