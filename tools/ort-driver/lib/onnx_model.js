'use strict';
// Reads the parts of an ONNX ModelProto the harness needs (graph inputs/outputs with their
// types, initializer names, top-level nodes, opsets) and builds tiny models for tests.

const fs = require('fs');
const { Writer, forEachField } = require('./protobuf');
const { encodeTensor, dataTypeName, ortTypeOf, zerosTensor } = require('./tensor_proto');

// ---- reading --------------------------------------------------------------------------------

function decodeShape(bytes) {
  const dims = [];
  forEachField(bytes, (field, wire, r) => {
    if (field !== 1) return;
    let dim = null; // neither dim_value nor dim_param: unknown dimension
    forEachField(r.bytes(), (f, w, rr) => {
      if (f === 1) dim = rr.varint();
      else if (f === 2) dim = rr.string();
    });
    dims.push(dim);
  });
  return dims;
}

// TypeProto -> {kind: 'tensor', elemType, shape (array, or null if rank unknown)}
//            | {kind: 'sequence'|'optional', elem} | {kind: 'map', keyType, value}
//            | {kind: 'sparse_tensor', elemType, shape} | {kind: 'unknown'}
function decodeType(bytes) {
  let type = { kind: 'unknown' };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1 || field === 8) {
      const t = { kind: field === 1 ? 'tensor' : 'sparse_tensor', elemType: 0, shape: null };
      forEachField(r.bytes(), (f, w, rr) => {
        if (f === 1) t.elemType = rr.varint();
        else if (f === 2) t.shape = decodeShape(rr.bytes());
      });
      type = t;
    } else if (field === 4 || field === 9) {
      const t = { kind: field === 4 ? 'sequence' : 'optional', elem: { kind: 'unknown' } };
      forEachField(r.bytes(), (f, w, rr) => { if (f === 1) t.elem = decodeType(rr.bytes()); });
      type = t;
    } else if (field === 5) {
      const t = { kind: 'map', keyType: 0, value: { kind: 'unknown' } };
      forEachField(r.bytes(), (f, w, rr) => {
        if (f === 1) t.keyType = rr.varint();
        else if (f === 2) t.value = decodeType(rr.bytes());
      });
      type = t;
    }
  });
  return type;
}

function typeToString(t) {
  switch (t.kind) {
    case 'tensor':
    case 'sparse_tensor': {
      const shape = t.shape ? `[${t.shape.map((d) => (d === null ? '?' : d)).join(',')}]` : '';
      const name = t.kind === 'tensor' ? 'tensor' : 'sparse_tensor';
      return `${name}(${dataTypeName(t.elemType).toLowerCase()})${shape}`;
    }
    case 'sequence': return `seq(${typeToString(t.elem)})`;
    case 'optional': return `optional(${typeToString(t.elem)})`;
    case 'map': return `map(${dataTypeName(t.keyType).toLowerCase()},${typeToString(t.value)})`;
    default: return 'unknown';
  }
}

function decodeValueInfo(bytes) {
  const v = { name: '', type: { kind: 'unknown' } };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) v.name = r.string();
    else if (field === 2) v.type = decodeType(r.bytes());
  });
  return v;
}

// subgraphs: the graph-valued attributes (If/Loop/Scan bodies).
function decodeNode(bytes) {
  const n = { opType: '', domain: '', name: '', inputs: [], outputs: [], subgraphs: [] };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) n.inputs.push(r.string());
    else if (field === 2) n.outputs.push(r.string());
    else if (field === 3) n.name = r.string();
    else if (field === 4) n.opType = r.string();
    else if (field === 7) n.domain = r.string();
    else if (field === 5) {
      forEachField(r.bytes(), (f, w, rr) => {
        if (f === 6 || f === 11) n.subgraphs.push(decodeGraph(rr.bytes()));
      });
    }
  });
  return n;
}

// Every value name read by a node of the graph or of its subgraphs (outer-scope references).
function namesRead(graph, into = new Set()) {
  for (const n of graph.nodes) {
    for (const i of n.inputs) into.add(i);
    for (const sg of n.subgraphs) namesRead(sg, into);
  }
  return into;
}

// Only the name of an initializer is read; its data is skipped.
function tensorName(bytes) {
  let name = '';
  forEachField(bytes, (field, wire, r) => { if (field === 8) name = r.string(); });
  return name;
}

function decodeGraph(bytes) {
  const g = { name: '', nodes: [], inputs: [], outputs: [], initializers: new Set() };
  forEachField(bytes, (field, wire, r) => {
    switch (field) {
      case 1: g.nodes.push(decodeNode(r.bytes())); break;
      case 2: g.name = r.string(); break;
      case 5: g.initializers.add(tensorName(r.bytes())); break;
      case 15: // SparseTensorProto: its name is values.name
        forEachField(r.bytes(), (f, w, rr) => { if (f === 1) g.initializers.add(tensorName(rr.bytes())); });
        break;
      case 11: g.inputs.push(decodeValueInfo(r.bytes())); break;
      case 12: g.outputs.push(decodeValueInfo(r.bytes())); break;
      default: break;
    }
  });
  // Before IR 4 initializers were also listed as graph inputs; those are not fed by callers.
  g.feedInputs = g.inputs.filter((i) => !g.initializers.has(i.name));
  return g;
}

// Graph inputs nothing reads. ORT saves such dangling inputs when it optimizes a model of
// IR < 4 (the initializers they stood for were folded away), and onnxruntime-node still
// insists on a feed for each; callers feed them placeholders.
function unusedInputs(graph) {
  const read = namesRead(graph);
  for (const o of graph.outputs) read.add(o.name);
  return graph.feedInputs.filter((i) => !read.has(i.name));
}

// Zeros shaped like a graph input (symbolic/unknown dims as 1); null if not a plain tensor.
function placeholderInput(input) {
  const t = input.type.kind === 'optional' ? input.type.elem : input.type;
  const type = t.kind === 'tensor' ? ortTypeOf(t.elemType) : null;
  if (!type) return null;
  const dims = (t.shape || []).map((d) => (typeof d === 'number' ? d : 1));
  return { ...zerosTensor(type, dims), name: input.name };
}

function decodeModel(bytes) {
  const m = { irVersion: 0, opsets: {}, producer: '', graph: null, functions: 0 };
  forEachField(bytes, (field, wire, r) => {
    if (field === 1) m.irVersion = r.varint();
    else if (field === 2) m.producer = r.string();
    else if (field === 7) m.graph = decodeGraph(r.bytes());
    else if (field === 25) { m.functions++; r.bytes(); }
    else if (field === 8) {
      let domain = '';
      let version = 0;
      forEachField(r.bytes(), (f, w, rr) => {
        if (f === 1) domain = rr.string();
        else if (f === 2) version = rr.varint();
      });
      m.opsets[domain] = version;
    }
  });
  if (!m.graph) throw new Error('model has no graph');
  return m;
}

function readModel(file) {
  return decodeModel(fs.readFileSync(file));
}

// ---- building (for tests) -------------------------------------------------------------------

const AttrType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, GRAPH: 5, FLOATS: 6, INTS: 7, STRINGS: 8 };

function encodeAttribute(name, value) {
  const w = new Writer().string(1, name);
  if (typeof value === 'number' && Number.isInteger(value) && !Object.is(value, -0)) {
    w.int(3, value).int(20, AttrType.INT);
  } else if (typeof value === 'number') {
    w.float(2, value).int(20, AttrType.FLOAT);
  } else if (typeof value === 'string') {
    w.string(4, value).int(20, AttrType.STRING);
  } else if (Array.isArray(value) && value.every((v) => typeof v === 'string')) {
    for (const v of value) w.string(9, v);
    w.int(20, AttrType.STRINGS);
  } else if (Array.isArray(value) && value.every(Number.isInteger)) {
    w.packed(8, value, 'varint').int(20, AttrType.INTS);
  } else if (Array.isArray(value)) {
    w.packed(7, value, 'float').int(20, AttrType.FLOATS);
  } else if (value && value.dims) {
    w.bytes(5, encodeTensor(value)).int(20, AttrType.TENSOR);
  } else if (value && value.nodes) {
    w.message(6, encodeGraph(value)).int(20, AttrType.GRAPH);
  } else {
    throw new Error(`attribute ${name}: unsupported value ${value}`);
  }
  return w;
}

// {name, elemType (DataType number), shape: [int | 'sym' | null]}
function encodeValueInfo(v) {
  const shape = new Writer();
  for (const d of v.shape || []) {
    const dim = new Writer();
    if (typeof d === 'number') dim.int(1, d);
    else if (typeof d === 'string') dim.string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new Writer().int(1, v.elemType);
  if (v.shape) tensorType.message(2, shape);
  const type = new Writer().message(1, tensorType);
  return new Writer().string(1, v.name).message(2, type);
}

// graph spec: {name, inputs, outputs, nodes: [{op, inputs, outputs, domain, name, attrs}],
//              initializers: [tensor]}; attrs values: number, string, number[], string[],
//              tensor, or a graph spec (for If/Loop/Scan bodies).
function encodeGraph(spec) {
  const g = new Writer();
  for (const n of spec.nodes) {
    const nw = new Writer();
    for (const i of n.inputs) nw.string(1, i);
    for (const o of n.outputs) nw.string(2, o);
    if (n.name) nw.string(3, n.name);
    nw.string(4, n.op);
    for (const [k, v] of Object.entries(n.attrs || {})) nw.message(5, encodeAttribute(k, v));
    if (n.domain) nw.string(7, n.domain);
    g.message(1, nw);
  }
  g.string(2, spec.name || 'g');
  for (const t of spec.initializers || []) g.bytes(5, encodeTensor(t));
  for (const i of spec.inputs) g.message(11, encodeValueInfo(i));
  for (const o of spec.outputs) g.message(12, encodeValueInfo(o));
  return g;
}

// model spec: a graph spec plus {irVersion = 8, opsets = {'': 17}}. Returns the bytes.
function buildModel(spec) {
  const m = new Writer().int(1, spec.irVersion || 8).string(2, 'onnx-rewrite-tests');
  m.message(7, encodeGraph(spec));
  for (const [domain, version] of Object.entries(spec.opsets || { '': 17 })) {
    const op = new Writer();
    if (domain) op.string(1, domain);
    op.int(2, version);
    m.message(8, op);
  }
  return m.finish();
}

module.exports = {
  decodeModel, readModel, decodeType, typeToString, unusedInputs, placeholderInput, buildModel,
};
