'use strict';
// Shared arithmetic of the quantized references (qlinear_reference.js, and
// rules/dynamic-quant-matmul/quant_matmul_reference.js): float32 rounding, round half to even,
// saturation, numpy broadcasting, and the reading of a model's nodes (attributes, initializer
// data) so that a reference can evaluate a com.microsoft model node by node.
//
// Everything is plain JavaScript numbers: integer products and sums of 8-bit values stay far
// below 2^53, so integer accumulation here is exact; `f32` rounds to float32 wherever the kernel
// (or the QDQ op it is compared with) works in float32.

const path = require('path');

const driverLib = path.join(__dirname, '..', '..', 'tools', 'ort-driver', 'lib');
const { forEachField } = require(path.join(driverLib, 'protobuf'));
const tp = require(path.join(driverLib, 'tensor_proto'));

const f32 = Math.fround;

// Round half to even (std::nearbyint in the default rounding mode).
function rne(x) {
  if (!Number.isFinite(x)) return x;
  const f = Math.floor(x);
  const d = x - f;
  if (d < 0.5) return f;
  if (d > 0.5) return f + 1;
  return f % 2 === 0 ? f : f + 1;
}

const RANGE = { uint8: [0, 255], int8: [-128, 127], int32: [-2147483648, 2147483647] };

function saturate(v, type) {
  const [lo, hi] = RANGE[type];
  return v < lo ? lo : v > hi ? hi : v;
}

// QuantizeLinear as ORT's MLAS does it: float32 division, round half to even, add the zero
// point, saturate.
function quantize(v, scale, zp, type) {
  return saturate(rne(f32(v / scale)) + zp, type);
}

// DequantizeLinear: (x - zp) in int32, times the float32 scale, rounded once to float32.
function dequantize(q, scale, zp) {
  return f32((q - zp) * scale);
}

function count(dims) {
  return dims.reduce((a, b) => a * b, 1);
}

function strides(dims) {
  const s = new Array(dims.length).fill(1);
  for (let i = dims.length - 2; i >= 0; i--) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// numpy (multidirectional) broadcasting of shapes.
function broadcastShape(...shapes) {
  const rank = Math.max(...shapes.map((s) => s.length));
  const out = new Array(rank).fill(1);
  for (const s of shapes) {
    for (let i = 0; i < s.length; i++) {
      const o = rank - s.length + i;
      if (s[i] === out[o] || s[i] === 1) continue;
      if (out[o] !== 1) throw new Error(`shapes [${shapes.map((x) => `[${x}]`).join(', ')}] do not broadcast`);
      out[o] = s[i];
    }
  }
  return out;
}

// For each flat index of `outDims`, the flat index into a tensor of `dims` broadcast to it.
function broadcastIndex(dims, outDims) {
  const n = count(outDims);
  const st = strides(dims);
  const off = outDims.length - dims.length;
  const idx = new Int32Array(n);
  const outSt = strides(outDims);
  for (let i = 0; i < n; i++) {
    let rem = i;
    let j = 0;
    for (let d = 0; d < outDims.length; d++) {
      const c = Math.floor(rem / outSt[d]);
      rem -= c * outSt[d];
      if (d >= off && dims[d - off] !== 1) j += c * st[d - off];
    }
    idx[i] = j;
  }
  return idx;
}

const ARRAYS = { uint8: Uint8Array, int8: Int8Array, int32: Int32Array, float32: Float32Array };

function tensor(type, dims, values) {
  return { type, dims: dims.slice(), data: ARRAYS[type].from(values) };
}

// A scalar input (a scale or zero point: one element); `dflt` when the input is absent.
function scalar(t, dflt = 0) {
  if (!t) return dflt;
  if (t.data.length !== 1) throw new Error(`expected one element, got dims [${t.dims}]`);
  return Number(t.data[0]);
}

// ---- reading a model: nodes with their attributes, initializers with their data ----------------

function decodeAttribute(bytes) {
  const a = { name: '', value: undefined };
  const floats = [];
  const ints = [];
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) a.name = r.string();
    else if (field === 2) a.value = r.float();
    else if (field === 3) a.value = Number(BigInt.asIntN(64, r.varintBig()));
    else if (field === 4) a.value = Buffer.from(r.bytes()).toString('utf8');
    else if (field === 7) r.repeated(wire, r.float, floats);
    else if (field === 8) r.repeated(wire, () => Number(BigInt.asIntN(64, r.varintBig())), ints);
  });
  if (a.value === undefined && floats.length) a.value = floats;
  if (a.value === undefined && ints.length) a.value = ints;
  return a;
}

function decodeNode(bytes) {
  const n = { opType: '', domain: '', inputs: [], outputs: [], attrs: {} };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) n.inputs.push(r.string());
    else if (field === 2) n.outputs.push(r.string());
    else if (field === 4) n.opType = r.string();
    else if (field === 7) n.domain = r.string();
    else if (field === 5) {
      const a = decodeAttribute(r.bytes());
      n.attrs[a.name] = a.value;
    }
  });
  return n;
}

// {nodes: [...], initializers: Map name -> {type, dims, data}}
function readGraph(bytes) {
  const g = { nodes: [], initializers: new Map() };
  forEachField(bytes, (field, wire, r) => {
    if (field !== 7) return;
    forEachField(r.bytes(), (f, w, rr) => {
      if (f === 1) g.nodes.push(decodeNode(rr.bytes()));
      else if (f === 5) {
        const t = tp.decodeTensor(rr.bytes());
        g.initializers.set(t.name, { type: t.type, dims: t.dims.map(Number), data: t.data });
      }
    });
  });
  return g;
}

// Evaluates the graph's nodes in order with `ops` ({OpType: (node, inputs) => [outputs]}),
// from the fed tensors ({name: {type, dims, data}}); returns every value computed.
function evaluate(graph, ops, feeds) {
  const values = new Map([...graph.initializers, ...Object.entries(feeds)]);
  for (const node of graph.nodes) {
    const op = ops[node.opType];
    if (!op) throw new Error(`no reference for ${node.domain ? `${node.domain}.` : ''}${node.opType}`);
    const inputs = node.inputs.map((name) => {
      if (name === '') return null;
      if (!values.has(name)) throw new Error(`${node.opType}: input '${name}' has no value`);
      return values.get(name);
    });
    const outs = op(node, inputs);
    node.outputs.forEach((name, i) => { if (name && outs[i]) values.set(name, outs[i]); });
  }
  return values;
}

module.exports = {
  f32, rne, saturate, quantize, dequantize, count, strides, broadcastShape, broadcastIndex, tensor, scalar,
  readGraph, evaluate, RANGE,
};
