'use strict';
// Naive reference of torch.nn.functional.gelu (= ONNX Gelu-20, com.microsoft Gelu / FastGelu):
//
//   approximate "none":  y = x/2 * (1 + erf(x / sqrt(2)))
//   approximate "tanh":  y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
//
// in float64; erf by its Maclaurin series for |x| <= 3, by the asymptotic series of erfc beyond
// (both within 1e-9).
// params: x (input name, default 'x'), output (default 'y'), approximate ('none' | 'tanh').

function erf(x) {
  const a = Math.abs(x);
  if (a > 3) {
    // erfc(a) = exp(-a^2) / (a sqrt(pi)) * sum_n (-1)^n (2n-1)!! / (2a^2)^n, summed while the terms shrink
    let term = 1;
    let sum = 1;
    for (let n = 1; n < 50; n++) {
      const next = -term * (2 * n - 1) / (2 * a * a);
      if (Math.abs(next) >= Math.abs(term)) break;
      term = next;
      sum += term;
    }
    return Math.sign(x) * (1 - Math.exp(-a * a) / (a * Math.sqrt(Math.PI)) * sum);
  }
  // erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
  let term = x;  // (-1)^n x^(2n+1) / n!
  let sum = x;
  for (let n = 1; n < 200; n++) {
    term *= -x * x / n;
    const next = term / (2 * n + 1);
    sum += next;
    if (Math.abs(next) < 1e-17 * Math.abs(sum)) break;
  }
  return 2 / Math.sqrt(Math.PI) * sum;
}

function gelu(v, approximate) {
  if (approximate === 'tanh') return 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
  return 0.5 * v * (1 + erf(v / Math.SQRT2));
}

module.exports = function geluReference(inputs, params = {}) {
  const { x: xName = 'x', output = 'y', approximate = 'none' } = params;
  if (approximate !== 'none' && approximate !== 'tanh') throw new Error(`gelu: approximate '${approximate}'`);
  const x = inputs[xName];
  if (!x) throw new Error(`gelu: no input '${xName}'`);
  const data = new x.data.constructor(x.data.length);
  for (let i = 0; i < data.length; i++) data[i] = gelu(x.data[i], approximate);
  return { [output]: { dims: x.dims.slice(), data, type: x.type } };
};

module.exports.erf = erf;
