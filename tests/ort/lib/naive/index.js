'use strict';
// Naive reference implementations for `compare.js A.onnx --reference NAME|FILE --params JSON`.
//
// Contract of a reference module:
//   module.exports = (inputs, params) => outputs      (may also return a Promise)
//   inputs:  {name: {dims: number[], data: TypedArray, type: 'float32' | 'int64' | ...}}
//            keyed by A's graph input names (float16 data is Uint16Array bits, int64 BigInt64Array)
//   params:  whatever JSON was given with --params ({} by default)
//   outputs: {name: {dims, data, type}} keyed by A's graph output names; type may be omitted
//            for float32/float64/int8..int64/uint8..uint64 typed arrays.
// The reference is the ground truth: compare.js measures A's outputs against it.
// Keep references obviously correct (plain loops over the spec), not fast.
//
// To add one: write NAME.js next to this file and list it below.

const registry = {
  add: require('./add'),
};

module.exports = { registry };
