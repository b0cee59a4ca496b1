'use strict';
// Element-wise comparison of two harness tensors ({type, dims, data}).
// Floats: |got - exp| <= atol + rtol * |exp|, NaN equals NaN, infinities must match exactly
// (numpy.testing.assert_allclose semantics): a NaN or infinity where the expected value is finite
// always fails. An expected float tensor with no finite element at all (a reference that broke
// down, against which every candidate that breaks the same way would pass) fails too, unless
// allowNonfiniteExpected. Integers, bools and strings: exact. The result counts the non-finite
// elements of each side (nonfinite_expected, nonfinite_got).

const { float16Bits, halfToFloat } = require('../../../tools/ort-driver/lib/tensor_proto');

const FLOAT_TYPES = new Set(['float32', 'float64', 'float16']);

// JSON can't carry NaN/Infinity/BigInt: keep them as strings.
function jsonValue(v) {
  if (typeof v === 'bigint') return Number.isSafeInteger(Number(v)) ? Number(v) : String(v);
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return v;
}

function unravel(index, dims) {
  const at = new Array(dims.length);
  for (let i = dims.length - 1; i >= 0; i--) {
    at[i] = dims[i] ? index % dims[i] : 0;
    index = dims[i] ? Math.floor(index / dims[i]) : 0;
  }
  return at;
}

function floatValues(t) {
  return t.type === 'float16' ? Float64Array.from(float16Bits(t.data), halfToFloat) : t.data;
}

// Returns {ok, message?, index?, at?, expected?, got?, max_abs, max_rel, sum_abs,
// nonfinite_expected, nonfinite_got}.
// max_rel is over elements whose expected value is non-zero (|diff| / |exp|); sum_abs adds the
// float elements' absolute differences (for a mean error: how often a model rounds the wrong way).
function compareTensors(exp, got, { rtol = 1e-3, atol = 1e-7, allowNonfiniteExpected = false } = {}) {
  if (exp.type !== got.type) {
    return { ok: false, message: `dtype ${got.type}, expected ${exp.type}` };
  }
  if (exp.dims.length !== got.dims.length || exp.dims.some((d, i) => d !== got.dims[i])) {
    return { ok: false, message: `shape [${got.dims}], expected [${exp.dims}]` };
  }
  const n = exp.data.length;
  let firstBad = -1;
  let maxAbs = 0;
  let maxRel = 0;
  let sumAbs = 0;
  let nonfiniteExp = 0;
  let nonfiniteGot = 0;

  if (FLOAT_TYPES.has(exp.type)) {
    const e = floatValues(exp);
    const g = floatValues(got);
    for (let i = 0; i < n; i++) {
      if (!Number.isFinite(e[i])) nonfiniteExp++;
      if (!Number.isFinite(g[i])) nonfiniteGot++;
    }
    for (let i = 0; i < n; i++) {
      const a = e[i];
      const b = g[i];
      if (a === b || (a !== a && b !== b)) continue; // equal, incl. same infinity; NaN == NaN
      const diff = Math.abs(b - a);
      const d = diff === diff ? diff : Infinity; // NaN against a number: infinitely wrong
      if (d > maxAbs) maxAbs = d;
      sumAbs += d;
      if (a !== 0 && Number.isFinite(a) && d / Math.abs(a) > maxRel) maxRel = d / Math.abs(a);
      // Infinities only match themselves (handled above), whatever the tolerance.
      const bad = !Number.isFinite(a) || !Number.isFinite(b) || !(diff <= atol + rtol * Math.abs(a));
      if (bad && firstBad < 0) firstBad = i;
    }
  } else if (exp.type === 'string') {
    for (let i = 0; i < n; i++) {
      if (exp.data[i] !== got.data[i]) { firstBad = i; break; }
    }
  } else {
    const big = typeof exp.data[0] === 'bigint';
    for (let i = 0; i < n; i++) {
      const a = exp.data[i];
      const b = got.data[i];
      if (a === b) continue;
      const diff = big ? Number(a > b ? a - b : b - a) : Math.abs(a - b);
      maxAbs = Math.max(maxAbs, diff);
      if (a !== 0 && a !== 0n) maxRel = Math.max(maxRel, diff / Math.abs(Number(a)));
      if (firstBad < 0) firstBad = i;
    }
  }

  const result = {
    ok: firstBad < 0, max_abs: jsonValue(maxAbs), max_rel: jsonValue(maxRel), sum_abs: sumAbs,
    nonfinite_expected: nonfiniteExp, nonfinite_got: nonfiniteGot,
  };
  if (n > 0 && nonfiniteExp === n && !allowNonfiniteExpected) {
    return Object.assign(result, {
      ok: false,
      message: `the expected output has no finite element (${n} NaN/Inf): nothing is proven against it ` +
        '(allow it explicitly if that is what the model computes)',
    });
  }
  if (firstBad >= 0) {
    const ev = exp.type === 'float16' ? halfToFloat(exp.data[firstBad]) : exp.data[firstBad];
    const gv = got.type === 'float16' ? halfToFloat(got.data[firstBad]) : got.data[firstBad];
    Object.assign(result, {
      index: firstBad,
      at: unravel(firstBad, exp.dims),
      expected: jsonValue(ev),
      got: jsonValue(gv),
      message: `first mismatch at [${unravel(firstBad, exp.dims)}]: got ${jsonValue(gv)}, ` +
        `expected ${jsonValue(ev)} (max abs err ${jsonValue(maxAbs)})`,
    });
  }
  return result;
}

module.exports = { compareTensors, jsonValue, unravel };
