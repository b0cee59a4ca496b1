'use strict';
// onnx TensorProto / SequenceProto / OptionalProto <-> plain tensors <-> ort.Tensor.
//
// A "tensor" in this harness is {name, dataType, type, dims, data}:
//   dataType  onnx TensorProto.DataType number (1 = FLOAT, ...)
//   type      onnxruntime-node type string ('float32', ...) or null when ORT-node can't hold it
//   dims      number[]
//   data      TypedArray (BigInt64Array/BigUint64Array for 64-bit ints, Uint16Array of IEEE half
//             bits for float16, Uint8Array 0/1 for bool) or string[] for strings;
//             null for types onnxruntime-node can't hold (then `raw` keeps the bytes).

const { Reader, Writer, forEachField } = require('./protobuf');

// TensorProto.DataType. Numbers above 16 are newer than /usr/include/onnx/onnx.proto.
const DataType = {
  UNDEFINED: 0, FLOAT: 1, UINT8: 2, INT8: 3, UINT16: 4, INT16: 5, INT32: 6, INT64: 7,
  STRING: 8, BOOL: 9, FLOAT16: 10, DOUBLE: 11, UINT32: 12, UINT64: 13, COMPLEX64: 14,
  COMPLEX128: 15, BFLOAT16: 16, FLOAT8E4M3FN: 17, FLOAT8E4M3FNUZ: 18, FLOAT8E5M2: 19,
  FLOAT8E5M2FNUZ: 20, UINT4: 21, INT4: 22, FLOAT4E2M1: 23, FLOAT8E8M0: 24, UINT2: 25, INT2: 26,
};
const DATA_TYPE_NAME = Object.fromEntries(Object.entries(DataType).map(([k, v]) => [v, k]));

// Element types onnxruntime-node 1.30 can feed and fetch (see README: int4/uint4, bfloat16,
// float8 and complex are not exposed by the node binding).
// field: the typed repeated TensorProto field used when raw_data is absent.
const ELEMENT = {
  [DataType.FLOAT]: { type: 'float32', Array: Float32Array, field: 'float' },
  [DataType.UINT8]: { type: 'uint8', Array: Uint8Array, field: 'int32' },
  [DataType.INT8]: { type: 'int8', Array: Int8Array, field: 'int32' },
  [DataType.UINT16]: { type: 'uint16', Array: Uint16Array, field: 'int32' },
  [DataType.INT16]: { type: 'int16', Array: Int16Array, field: 'int32' },
  [DataType.INT32]: { type: 'int32', Array: Int32Array, field: 'int32' },
  [DataType.INT64]: { type: 'int64', Array: BigInt64Array, field: 'int64' },
  [DataType.STRING]: { type: 'string', Array: null, field: 'string' },
  [DataType.BOOL]: { type: 'bool', Array: Uint8Array, field: 'int32' },
  [DataType.FLOAT16]: { type: 'float16', Array: Uint16Array, field: 'int32' },
  [DataType.DOUBLE]: { type: 'float64', Array: Float64Array, field: 'double' },
  [DataType.UINT32]: { type: 'uint32', Array: Uint32Array, field: 'uint64' },
  [DataType.UINT64]: { type: 'uint64', Array: BigUint64Array, field: 'uint64' },
};
const TYPE_TO_DATA_TYPE = Object.fromEntries(
  Object.entries(ELEMENT).map(([dt, e]) => [e.type, Number(dt)]));

// TensorProto field numbers (onnx.proto).
const F = {
  dims: 1, data_type: 2, segment: 3, float_data: 4, int32_data: 5, string_data: 6,
  int64_data: 7, name: 8, raw_data: 9, double_data: 10, uint64_data: 11, doc_string: 12,
  external_data: 13, data_location: 14,
};

function dataTypeName(dt) {
  return DATA_TYPE_NAME[dt] || `data_type ${dt}`;
}

function ortTypeOf(dataType) {
  return ELEMENT[dataType] ? ELEMENT[dataType].type : null;
}

function dataTypeOf(ortType) {
  const dt = TYPE_TO_DATA_TYPE[ortType];
  if (dt === undefined) throw new Error(`unknown tensor type '${ortType}'`);
  return dt;
}

function elementCount(dims) {
  return dims.reduce((a, d) => a * d, 1);
}

// Copies little-endian bytes into a freshly aligned typed array.
function fromRawBytes(Ctor, bytes) {
  if (bytes.length % Ctor.BYTES_PER_ELEMENT !== 0) {
    throw new Error(`raw_data length ${bytes.length} is not a multiple of ${Ctor.BYTES_PER_ELEMENT}`);
  }
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return new Ctor(copy.buffer);
}

// ---- decoding ---------------------------------------------------------------------------

function decodeTensor(bytes) {
  const t = { name: '', dataType: DataType.UNDEFINED, dims: [] };
  let raw = null;
  const floats = [], int32s = [], int64s = [], doubles = [], uint64s = [], strings = [];
  let external = false;
  forEachField(bytes, (field, wire, r) => {
    switch (field) {
      case F.dims: r.repeated(wire, r.varint, t.dims); break;
      case F.data_type: t.dataType = r.varint(); break;
      case F.float_data: r.repeated(wire, r.float, floats); break;
      case F.int32_data: r.repeated(wire, r.varint, int32s); break;
      case F.string_data: strings.push(Buffer.from(r.bytes()).toString('utf8')); break;
      case F.int64_data: r.repeated(wire, r.varintBig, int64s); break;
      case F.name: t.name = r.string(); break;
      case F.raw_data: raw = r.bytes(); break;
      case F.double_data: r.repeated(wire, r.double, doubles); break;
      case F.uint64_data: r.repeated(wire, r.uvarintBig, uint64s); break;
      case F.data_location: external = r.varint() === 1; break;
      case F.segment: throw new Error('TensorProto.segment is not supported');
      default: break; // doc_string, metadata, ... are skipped
    }
  });
  if (external) throw new Error(`tensor '${t.name}' uses external data, which is not supported`);

  const el = ELEMENT[t.dataType];
  t.type = el ? el.type : null;
  const n = elementCount(t.dims);
  if (!el) {
    t.data = null;
    t.raw = raw; // kept for reporting; bfloat16/float8/int4/complex can't go through ORT-node
    return t;
  }
  if (el.type === 'string') {
    t.data = strings;
  } else if (raw) {
    t.data = fromRawBytes(el.Array, raw);
  } else {
    const src = { float: floats, int32: int32s, int64: int64s, double: doubles, uint64: uint64s }[el.field];
    // int32_data carries uint8/int8/uint16/int16/bool and float16 bit patterns too; the typed
    // array constructor narrows them. uint64_data carries uint32 as BigInt.
    t.data = el.Array === Uint32Array ? Uint32Array.from(src, Number) : el.Array.from(src);
  }
  if (t.data.length !== n) {
    throw new Error(`tensor '${t.name}': ${t.data.length} values for dims [${t.dims}] (${n} expected)`);
  }
  return t;
}

// SequenceProto / OptionalProto elem_type values.
const ValueKind = { UNDEFINED: 0, TENSOR: 1, SPARSE_TENSOR: 2, SEQUENCE: 3, MAP: 4, OPTIONAL: 5 };
const VALUE_KIND_NAME = Object.fromEntries(Object.entries(ValueKind).map(([k, v]) => [v, k]));

// SequenceProto: {name, elemType, values: [...]} (tensors or nested sequences/optionals).
function decodeSequence(bytes) {
  const s = { kind: 'sequence', name: '', elemType: 0, values: [] };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) s.name = r.string();
    else if (field === 2) s.elemType = r.varint();
    else if (field === 3) s.values.push(decodeTensor(r.bytes()));
    else if (field === 5) s.values.push(decodeSequence(r.bytes()));
    else if (field === 7) s.values.push(decodeOptional(r.bytes()));
    else if (field === 4 || field === 6) {
      throw new Error(`SequenceProto of ${VALUE_KIND_NAME[field === 4 ? 2 : 4]} is not supported`);
    }
  });
  return s;
}

// OptionalProto: {name, elemType, value: tensor | sequence | optional | null}.
function decodeOptional(bytes) {
  const o = { kind: 'optional', name: '', elemType: 0, value: null };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) o.name = r.string();
    else if (field === 2) o.elemType = r.varint();
    else if (field === 3) o.value = decodeTensor(r.bytes());
    else if (field === 5) o.value = decodeSequence(r.bytes());
    else if (field === 7) o.value = decodeOptional(r.bytes());
    else if (field === 4 || field === 6) {
      throw new Error(`OptionalProto of ${VALUE_KIND_NAME[field === 4 ? 2 : 4]} is not supported`);
    }
  });
  return o;
}

// ---- encoding ---------------------------------------------------------------------------

// Accepts plain arrays (and Float16Array) where a typed array is expected.
function asTypedArray(el, data) {
  if (el.type === 'float16') return float16Bits(data);
  if (data instanceof el.Array) return data;
  const big = el.Array === BigInt64Array || el.Array === BigUint64Array;
  return big ? el.Array.from(data, (v) => BigInt(v)) : el.Array.from(data, Number);
}

// opts.raw (default true): numbers go to raw_data like onnx.numpy_helper.from_array;
// with raw=false they go to the typed repeated field, packed unless opts.packed === false.
function encodeTensor(t, opts = {}) {
  const { raw = true, packed = true } = opts;
  const dataType = t.dataType !== undefined ? t.dataType : dataTypeOf(t.type);
  const el = ELEMENT[dataType];
  if (!el) throw new Error(`cannot encode ${dataTypeName(dataType)} tensors`);
  const w = new Writer();
  const repeated = (field, values, kind) =>
    (packed ? w.packed(field, values, kind) : w.unpacked(field, values, kind));
  if (t.dims.length) repeated(F.dims, t.dims, 'varint');
  w.int(F.data_type, dataType);
  if (t.name) w.string(F.name, t.name);
  if (el.type === 'string') {
    for (const s of t.data) w.string(F.string_data, s);
    return w.finish();
  }
  const d = asTypedArray(el, t.data);
  if (raw) w.bytes(F.raw_data, new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
  else if (el.field === 'float') repeated(F.float_data, d, 'float');
  else if (el.field === 'double') repeated(F.double_data, d, 'double');
  else if (el.field === 'int64') repeated(F.int64_data, d, 'varint');
  else if (el.field === 'uint64') repeated(F.uint64_data, d, 'varint');
  else repeated(F.int32_data, d, 'varint'); // also uint8/int8/uint16/int16/bool/float16 bits
  return w.finish();
}

function encodeSequence(s) {
  const w = new Writer();
  if (s.name) w.string(1, s.name);
  w.int(2, ValueKind.TENSOR);
  for (const v of s.values) w.bytes(3, encodeTensor(v));
  return w.finish();
}

function encodeOptional(o) {
  const w = new Writer();
  if (o.name) w.string(1, o.name);
  w.int(2, ValueKind.TENSOR);
  if (o.value) w.bytes(3, encodeTensor(o.value));
  return w.finish();
}

// ---- ort.Tensor conversion ----------------------------------------------------------------

let ortModule = null;
function ort() {
  if (!ortModule) ortModule = require('onnxruntime-node');
  return ortModule;
}

// float16 data may arrive as Float16Array on runtimes that have it; the harness keeps bits.
function float16Bits(data) {
  if (data instanceof Uint16Array) return data;
  if (typeof Float16Array !== 'undefined' && data instanceof Float16Array) {
    return new Uint16Array(data.buffer, data.byteOffset, data.length);
  }
  return Uint16Array.from(data, floatToHalf);
}

function toOrtTensor(t) {
  if (!t.type) throw new Error(`onnxruntime-node cannot hold ${dataTypeName(t.dataType)} tensors`);
  let data = t.data;
  if (t.type === 'float16' && typeof Float16Array !== 'undefined') {
    // With a native Float16Array, onnxruntime-common expects that class, not raw bits.
    const bits = float16Bits(data);
    data = new Float16Array(bits.buffer, bits.byteOffset, bits.length);
  }
  return new (ort().Tensor)(t.type, data, t.dims);
}

function fromOrtTensor(tensor, name = '') {
  const type = tensor.type;
  let data = tensor.data;
  if (type === 'float16') data = float16Bits(data);
  return { name, dataType: dataTypeOf(type), type, dims: Array.from(tensor.dims, Number), data };
}

// ---- float16 ------------------------------------------------------------------------------

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

// Round-to-nearest-even float -> IEEE half bits.
function floatToHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++; // may carry into exponent: fine
  return sign | half;
}

// Values of a numeric tensor as plain numbers (float16 decoded, BigInt converted).
function toNumbers(t) {
  if (t.type === 'float16') return Float64Array.from(float16Bits(t.data), halfToFloat);
  if (t.type === 'int64' || t.type === 'uint64') return Float64Array.from(t.data, Number);
  return t.data;
}

// ---- deterministic random tensors ---------------------------------------------------------

// mulberry32: tiny, fast, good enough for test inputs; same seed -> same tensors everywhere.
function makeRng(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FLOAT_TYPES = new Set(['float32', 'float64', 'float16']);

// ranges: {float: [lo, hi) , int: [lo, hi] inclusive}
function randomTensor(type, dims, rng, ranges = {}) {
  const [flo, fhi] = ranges.float || [-1, 1];
  const [ilo, ihi] = ranges.int || [0, 10];
  const n = elementCount(dims);
  const dataType = dataTypeOf(type);
  let data;
  if (type === 'string') {
    data = Array.from({ length: n }, () => {
      const len = 1 + Math.floor(rng() * 4);
      let s = '';
      for (let i = 0; i < len; i++) s += String.fromCharCode(97 + Math.floor(rng() * 26));
      return s;
    });
  } else if (type === 'bool') {
    data = Uint8Array.from({ length: n }, () => (rng() < 0.5 ? 1 : 0));
  } else if (FLOAT_TYPES.has(type)) {
    const vals = Float64Array.from({ length: n }, () => flo + (fhi - flo) * rng());
    data = type === 'float16' ? Uint16Array.from(vals, floatToHalf) : ELEMENT[dataType].Array.from(vals);
  } else {
    const ints = Array.from({ length: n }, () => ilo + Math.floor(rng() * (ihi - ilo + 1)));
    const Ctor = ELEMENT[dataType].Array;
    data = Ctor === BigInt64Array || Ctor === BigUint64Array
      ? Ctor.from(ints, (v) => BigInt(v)) : Ctor.from(ints);
  }
  return { name: '', dataType, type, dims: dims.slice(), data };
}

function zerosTensor(type, dims) {
  const dataType = dataTypeOf(type);
  const n = elementCount(dims);
  const data = type === 'string' ? new Array(n).fill('') : new ELEMENT[dataType].Array(n);
  return { name: '', dataType, type, dims: dims.slice(), data };
}

module.exports = {
  DataType, ELEMENT, ValueKind, F,
  dataTypeName, ortTypeOf, dataTypeOf, elementCount,
  decodeTensor, decodeSequence, decodeOptional,
  encodeTensor, encodeSequence, encodeOptional,
  toOrtTensor, fromOrtTensor, float16Bits,
  halfToFloat, floatToHalf, toNumbers,
  makeRng, randomTensor, zerosTensor,
};
