'use strict';
// Naive references for the com.microsoft ops the qlinear-to-qdq rules rewrite, written from the
// semantics in README.md ("Semantics"): integer arithmetic exact, float32 exactly where ORT's
// kernel computes in float32, round half to even, saturation. quant_compare.js --reference
// evaluates a contrib model with them: the verdict then does not depend on the CPU (ORT's own
// kernels do: MLAS's u8s8 GEMM saturates int16 pair sums on x86 without VNNI).
//
// Each op: (node, inputs) => [outputs]; inputs are {type, dims, data} (null when absent), node
// is {opType, attrs, ...}. Options through the environment are deliberately absent: a negative
// control is a different *model* (a zero point off by one), never a different reference.

const m = require('./quant_math');

const { f32, rne, saturate, quantize, dequantize, scalar, tensor } = m;

// The quantized type of an output: the type of its zero point, else of the input.
function qtype(zp, x) {
  return zp ? zp.type : x.type;
}

// QLinearAdd / QLinearMul. MLAS (qladd.cpp, qlmul.cpp) in float32: Add computes
// C_zp - (rA*A_zp + rB*B_zp) + rA*A + rB*B with rA = A_scale/C_scale, rB = B_scale/C_scale;
// Mul the integer product (A - A_zp)(B - B_zp) times A_scale*B_scale/C_scale, plus C_zp. Both
// round half to even and saturate; numpy broadcasting.
function binary(mul) {
  return (node, [a, as, az, b, bs, bz, cs, cz]) => {
    const type = qtype(cz, a);
    const A = scalar(as);
    const B = scalar(bs);
    const C = scalar(cs);
    const Az = scalar(az);
    const Bz = scalar(bz);
    const Cz = scalar(cz);
    const dims = m.broadcastShape(a.dims, b.dims);
    const ia = m.broadcastIndex(a.dims, dims);
    const ib = m.broadcastIndex(b.dims, dims);
    const out = new Array(ia.length);
    if (mul) {
      const r = f32(f32(A * B) / C);
      for (let i = 0; i < out.length; i++) {
        const p = (Number(a.data[ia[i]]) - Az) * (Number(b.data[ib[i]]) - Bz);
        out[i] = saturate(rne(f32(p * r)) + Cz, type);
      }
    } else {
      const rA = f32(A / C);
      const rB = f32(B / C);
      const fixed = f32(Cz - f32(f32(rA * Az) + f32(rB * Bz)));
      for (let i = 0; i < out.length; i++) {
        const v = f32(f32(fixed + f32(rA * Number(a.data[ia[i]]))) + f32(rB * Number(b.data[ib[i]])));
        out[i] = saturate(rne(v), type);
      }
    }
    return [tensor(type, dims, out)];
  };
}

// float32 sigmoid as MLAS computes it (logistic.cpp: Eigen's rational polynomial, clamped to
// [-18, 18]; FMA as in the AVX2/AVX-512 kernels). ORT's Sigmoid op and its QLinearSigmoid table
// both call it.
const L = [4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03, 2.48287947061529e-01]
  .map(f32);
const Q = [6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03, 1.16817656904453e-01,
  9.93151921023180e-01].map(f32);
const fma = (a, b, c) => f32(a * b + c); // a*b is exact in double for float32 a, b
function logistic(x) {
  const v = Math.min(18, Math.max(-18, x));
  const v2 = f32(v * v);
  let p = fma(v2, L[0], L[1]);
  for (const c of L.slice(2)) p = fma(p, v2, c);
  p = f32(p * v);
  let q = fma(v2, Q[0], Q[1]);
  for (const c of Q.slice(2)) q = fma(q, v2, c);
  return Math.min(1, Math.max(0, f32(f32(p / q) + 0.5)));
}

// QLinearSigmoid / QLinearLeakyRelu: a table quantize(f(dequantize(x))) over the 256 inputs.
function lookup(fn) {
  return (node, [x, xs, xz, ys, yz]) => {
    const type = qtype(yz, x);
    const Xs = scalar(xs);
    const Xz = scalar(xz);
    const Ys = scalar(ys);
    const Yz = scalar(yz);
    const out = Array.from(x.data, (q) => quantize(fn(dequantize(Number(q), Xs, Xz), node), Ys, Yz, type));
    return [tensor(type, x.dims, out)];
  };
}

const sigmoid = lookup((v) => logistic(v));
const leakyRelu = lookup((v, node) => {
  const alpha = f32(node.attrs.alpha === undefined ? 0.01 : node.attrs.alpha);
  return v >= 0 ? v : f32(alpha * v);
});

// QLinearConcat (Y_scale, Y_zp, X0, s0, z0, ...): each input requantized (a copy when its
// parameters are the output's), then concatenated along axis.
function concat(node, inputs) {
  const [ys, yz] = inputs;
  const Ys = scalar(ys);
  const Yz = scalar(yz);
  const parts = [];
  for (let i = 2; i < inputs.length; i += 3) parts.push([inputs[i], scalar(inputs[i + 1]), scalar(inputs[i + 2])]);
  const type = yz ? yz.type : parts[0][0].type;
  const rank = parts[0][0].dims.length;
  const axis = (node.attrs.axis + rank) % rank;
  const dims = parts[0][0].dims.slice();
  dims[axis] = parts.reduce((s, [x]) => s + x.dims[axis], 0);
  const outer = m.count(dims.slice(0, axis));
  const out = [];
  for (let o = 0; o < outer; o++) {
    for (const [x, s, z] of parts) {
      const block = m.count(x.dims.slice(axis));
      for (let i = 0; i < block; i++) {
        const q = Number(x.data[o * block + i]);
        out.push(s === Ys && z === Yz ? q : quantize(dequantize(q, s, z), Ys, Yz, type));
      }
    }
  }
  return [tensor(type, dims, out)];
}

// QLinearGlobalAveragePool: the exact integer sum over the spatial dims minus x_zp·count, times
// the float32 x_scale/(y_scale·count), rounded half to even, plus y_zp, saturated (MLAS
// qlgavgpool.cpp + MlasRequantizeOutput). NCHW, or channels_last (N, spatial..., C).
function globalAveragePool(node, [x, xs, xz, ys, yz]) {
  const type = qtype(yz, x);
  const last = node.attrs.channels_last === 1;
  const dims = x.dims;
  const n = dims[0];
  const c = last ? dims[dims.length - 1] : dims[1];
  const spatial = last ? dims.slice(1, -1) : dims.slice(2);
  const size = m.count(spatial);
  const Xz = scalar(xz);
  const scale = f32(scalar(xs) / f32(scalar(ys) * size));
  const Yz = scalar(yz);
  const out = new Array(n * c);
  for (let b = 0; b < n; b++) {
    for (let ch = 0; ch < c; ch++) {
      let sum = 0;
      for (let s = 0; s < size; s++) sum += Number(x.data[last ? (b * size + s) * c + ch : (b * c + ch) * size + s]);
      out[b * c + ch] = saturate(rne(f32((sum - Xz * size) * scale)) + Yz, type);
    }
  }
  const outDims = last ? [n, ...spatial.map(() => 1), c] : [n, c, ...spatial.map(() => 1)];
  return [tensor(type, outDims, out)];
}

// QLinearSoftmax (qlinear_softmax.cc): a float table exp((i - 255 + shift)·x_scale) (double,
// stored as float) with shift = max(0, ln(FLT_MAX/D) - 5)/x_scale; per row the largest input
// maps to entry 255, the sum accumulates in float32, and y = round(t·floor(1/y_scale)/sum) +
// y_zp, saturated. opset < 13: over all dims from axis on; >= 13: over the one axis (default -1).
const FLT_MAX = 3.4028234663852886e38;
function softmax(node, [x, xs, , ys, yz]) {
  const type = qtype(yz, x);
  const rank = x.dims.length;
  const opset = node.attrs.opset;
  const axis = ((node.attrs.axis === undefined ? -1 : node.attrs.axis) + rank) % rank;
  const Xs = scalar(xs);
  const Ys = Math.floor(f32(1 / scalar(ys)));
  const Yz = scalar(yz);
  // Rows: [outer, D, inner] where the reduced block is D (inner = 1 below 13).
  const outer = m.count(x.dims.slice(0, axis));
  const D = opset < 13 ? m.count(x.dims.slice(axis)) : x.dims[axis];
  const inner = opset < 13 ? 1 : m.count(x.dims.slice(axis + 1));
  const shift = Math.max(0, Math.log(FLT_MAX / D) - 5) / Xs;
  const table = Array.from({ length: 256 }, (_, i) => f32(Math.exp((i - 255 + shift) * Xs)));
  const out = new Array(x.data.length);
  for (let o = 0; o < outer; o++) {
    for (let j = 0; j < inner; j++) {
      const at = (d) => (o * D + d) * inner + j;
      let max = -Infinity;
      for (let d = 0; d < D; d++) max = Math.max(max, Number(x.data[at(d)]));
      let sum = 0;
      for (let d = 0; d < D; d++) sum = f32(sum + table[Number(x.data[at(d)]) - max + 255]);
      for (let d = 0; d < D; d++) {
        const t = table[Number(x.data[at(d)]) - max + 255];
        out[at(d)] = saturate(rne(f32(f32(t * Ys) / sum)) + Yz, type);
      }
    }
  }
  return [tensor(type, x.dims, out)];
}

// QGemm: acc = Σ_k (A - a_zp)(B - b_zp[n]) + C, exact integers (C int32, broadcast to [M, N]);
// Y = acc·alpha·a_scale·b_scale[n] (float output: rounded once to float32), or quantized:
// round_half_even(Y / y_scale) + y_zp, saturated. transA / transB as in Gemm. The scales are
// multiplied in double: the exact value of the product of the float32 parameters, to well
// within 1e-15.
function qgemm(node, [a, as, az, b, bs, bz, c, ys, yz]) {
  const transA = node.attrs.transA === 1;
  const transB = node.attrs.transB === 1;
  const alpha = node.attrs.alpha === undefined ? 1 : node.attrs.alpha;
  const [M, K] = transA ? [a.dims[1], a.dims[0]] : a.dims;
  const N = transB ? b.dims[0] : b.dims[1];
  const A = (i, k) => Number(a.data[transA ? k * M + i : i * K + k]);
  const B = (k, j) => Number(b.data[transB ? j * K + k : k * N + j]);
  const Az = scalar(az);
  const perColumn = (t, j) => (t.data.length === 1 ? Number(t.data[0]) : Number(t.data[j]));
  const cIndex = c ? m.broadcastIndex(c.dims, [M, N]) : null;
  const out = new Array(M * N);
  const quantized = !!ys;
  const type = quantized ? yz.type : 'float32';
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      const Bz = perColumn(bz, j);
      let acc = 0;
      for (let k = 0; k < K; k++) acc += (A(i, k) - Az) * (B(k, j) - Bz);
      if (c) acc += Number(c.data[cIndex[i * N + j]]);
      const y = acc * alpha * scalar(as) * perColumn(bs, j);
      out[i * N + j] = quantized ? saturate(rne(y / scalar(ys)) + scalar(yz), type) : f32(y);
    }
  }
  return [tensor(type, [M, N], out)];
}

// The standard ops around them in a model ORT fused and saved (OrtFused): QuantizeLinear and
// DequantizeLinear per tensor or per axis, Flatten.
function perAxis(t, x, axis) {
  if (!t) return () => 0;
  if (t.data.length === 1) return () => Number(t.data[0]);
  const ax = ((axis === undefined ? 1 : axis) + x.dims.length) % x.dims.length;
  const inner = m.count(x.dims.slice(ax + 1));
  return (i) => Number(t.data[Math.floor(i / inner) % x.dims[ax]]);
}
function quantizeLinear(node, [x, s, z]) {
  const type = z ? z.type : 'uint8';
  const S = perAxis(s, x, node.attrs.axis);
  const Z = perAxis(z, x, node.attrs.axis);
  return [tensor(type, x.dims, Array.from(x.data, (v, i) => quantize(v, S(i), Z(i), type)))];
}
function dequantizeLinear(node, [x, s, z]) {
  const S = perAxis(s, x, node.attrs.axis);
  const Z = perAxis(z, x, node.attrs.axis);
  return [tensor('float32', x.dims, Array.from(x.data, (v, i) => dequantize(Number(v), S(i), Z(i))))];
}
function flatten(node, [x]) {
  const axis = ((node.attrs.axis === undefined ? 1 : node.attrs.axis) + x.dims.length) % x.dims.length;
  return [{ type: x.type, dims: [m.count(x.dims.slice(0, axis)), m.count(x.dims.slice(axis))], data: x.data }];
}

module.exports = {
  QuantizeLinear: quantizeLinear,
  DequantizeLinear: dequantizeLinear,
  Flatten: flatten,
  QLinearAdd: binary(false),
  QLinearMul: binary(true),
  QLinearSigmoid: sigmoid,
  QLinearLeakyRelu: leakyRelu,
  QLinearConcat: concat,
  QLinearGlobalAveragePool: globalAveragePool,
  QLinearSoftmax: softmax,
  QGemm: qgemm,
  logistic,
};
