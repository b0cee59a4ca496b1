'use strict';
// Naive references for com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul, written
// from README.md's "Semantics" (ORT's dynamic_quantize_matmul.cc, qmath.h): the int32
// accumulation exact, then the kernel's two float32 steps, acc·(a_scale·b_scale) + bias; a scale
// the kernel can't apply inside its GEMM multiplies the output after the bias. For
// rules/qlinear-to-qdq/quant_compare.js --reference (with ../qlinear-to-qdq/qlinear_reference.js
// for QuantizeLinear/DequantizeLinear around them in a model ORT fused).

const path = require('path');

const m = require(path.join(__dirname, '..', 'qlinear-to-qdq', 'quant_math'));

const { f32, rne, saturate, tensor } = m;

function isScalar(t) {
  return t.data.length === 1;
}

// IsBQuantParamSupported: per tensor, or per column of B ([N] for a 2-D B, or B's shape with
// the K dim 1).
function perColumn(t, b) {
  if (isScalar(t)) return true;
  const r = b.dims.length;
  if (t.dims.length === 1) return r === 2 && t.dims[0] === b.dims[1];
  if (t.dims.length !== r) return false;
  return t.dims.every((d, i) => (i === r - 2 ? d === 1 : d === b.dims[i]));
}

// The element of a per-tensor/per-column parameter for B's batch index `batch` (flat, over B's
// batch dims) and column n.
function columnValue(t, b, batch, n) {
  if (isScalar(t)) return Number(t.data[0]);
  const N = b.dims[b.dims.length - 1];
  return Number(t.data[t.dims.length === 1 ? n : batch * N + n]);
}

// acc = Σ_k (A - a_zp)(B - b_zp) exact; Y = f32(f32(f32(acc)·gemmScale) + bias); then, for scales
// outside the GEMM, Y·scale broadcast (ScaleOutput).
function matmulToFloat(a, b, aScale, bScale, aZp, bZp, bias) {
  const K = a.dims[a.dims.length - 1];
  const M = a.dims[a.dims.length - 2];
  const N = b.dims[b.dims.length - 1];
  const batchA = a.dims.slice(0, -2);
  const batchB = b.dims.slice(0, -2);
  const batch = m.broadcastShape(batchA, batchB);
  const nb = m.count(batch);
  const ia = m.broadcastIndex(batchA, batch);
  const ib = m.broadcastIndex(batchB, batch);
  const az = aZp ? Number(aZp.data[0]) : 0;
  const aScalar = isScalar(aScale);
  const bInGemm = perColumn(bScale, b);
  const sa = aScalar ? Number(aScale.data[0]) : 1;
  const out = new Array(nb * M * N);
  for (let p = 0; p < nb; p++) {
    const offA = ia[p] * M * K;
    const offB = ib[p] * K * N;
    for (let i = 0; i < M; i++) {
      for (let n = 0; n < N; n++) {
        const bz = bZp ? columnValue(bZp, b, ib[p], n) : 0;
        let acc = 0;
        for (let k = 0; k < K; k++) acc += (Number(a.data[offA + i * K + k]) - az) * (Number(b.data[offB + k * N + n]) - bz);
        const scale = bInGemm ? f32(sa * columnValue(bScale, b, ib[p], n)) : f32(sa);
        let y = f32(f32(acc) * scale);
        if (bias) y = f32(y + Number(bias.data[n]));
        out[(p * M + i) * N + n] = y;
      }
    }
  }
  const dims = [...batch, M, N];
  let y = out;
  for (const [t, after] of [[aScale, !aScalar], [bScale, !bInGemm]]) {
    if (!after) continue;
    const idx = m.broadcastIndex(t.dims, dims);
    y = y.map((v, i) => f32(v * Number(t.data[idx[i]])));
  }
  return [tensor('float32', dims, y)];
}

// FixupScaleTensor: scales given the other way round are swapped back.
function fixupScales(aScale, bScale) {
  if (!isScalar(aScale)) {
    const r = aScale.dims.length;
    if (r === 1 || aScale.dims[r - 1] !== 1) return [bScale, aScale];
  } else if (!isScalar(bScale)) {
    const r = bScale.dims.length;
    if (r > 1 && bScale.dims[r - 2] !== 1) return [bScale, aScale];
  }
  return [aScale, bScale];
}

function matMulIntegerToFloat(node, [a, b, aScale, bScale, aZp, bZp, bias]) {
  const [sa, sb] = fixupScales(aScale, bScale);
  return matmulToFloat(a, b, sa, sb, aZp, bZp, bias);
}

// DynamicQuantizeLinear of A as ORT's GetQuantizationParameter + MlasQuantizeLinear do it: the
// range widened to include 0, scale (max - min)/255 in float32, zero point round_half_even(
// clamp(0 - min/scale)), values round_half_even(a/scale) + zp, saturated to uint8.
function dynamicQuantize(a) {
  let min = 0;
  let max = 0;
  for (const v of a.data) {
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  const scale = max === min ? 1 : f32(f32(max - min) / 255);
  const zp = rne(Math.max(0, Math.min(255, f32(0 - f32(min / scale)))));
  const q = Array.from(a.data, (v) => saturate(rne(f32(v / scale)) + zp, 'uint8'));
  return [tensor('uint8', a.dims, q), tensor('float32', [], [scale]), tensor('uint8', [], [zp])];
}

function dynamicQuantizeMatMul(node, [a, b, bScale, bZp, bias]) {
  const [q, scale, zp] = dynamicQuantize(a);
  return matmulToFloat(q, b, scale, bScale, zp, bZp, bias);
}

module.exports = {
  MatMulIntegerToFloat: matMulIntegerToFloat,
  DynamicQuantizeMatMul: dynamicQuantizeMatMul,
  DynamicQuantizeLinear: (node, [a]) => dynamicQuantize(a),
};
