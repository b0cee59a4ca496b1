'use strict';
// numpy-style broadcasting helpers shared by the naive references.

function broadcastShape(a, b) {
  const rank = Math.max(a.length, b.length);
  const out = [];
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1;
    const db = b[b.length - rank + i] ?? 1;
    if (da !== db && da !== 1 && db !== 1) throw new Error(`cannot broadcast [${a}] with [${b}]`);
    out.push(da === 1 ? db : da);
  }
  return out;
}

// Flat index into a tensor of shape `dims` for the multi-index `at` of the broadcast result.
function broadcastIndex(at, dims) {
  const offset = at.length - dims.length;
  let index = 0;
  for (let i = 0; i < dims.length; i++) index = index * dims[i] + (dims[i] === 1 ? 0 : at[offset + i]);
  return index;
}

// Calls fn(at) for every multi-index of `dims`, in row-major order.
function forEachIndex(dims, fn) {
  const n = dims.reduce((x, d) => x * d, 1);
  const at = new Array(dims.length).fill(0);
  for (let k = 0; k < n; k++) {
    fn(at, k);
    for (let i = dims.length - 1; i >= 0; i--) {
      if (++at[i] < dims[i]) break;
      at[i] = 0;
    }
  }
}

module.exports = { broadcastShape, broadcastIndex, forEachIndex };
