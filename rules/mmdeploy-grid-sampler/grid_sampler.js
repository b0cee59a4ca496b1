'use strict';
// Naive reference of mmdeploy::grid_sampler / mmcv::grid_sampler (= torch.nn.functional.grid_sample,
// 4-D), in plain loops, a line-by-line port of mmdeploy's ONNX Runtime kernel
// (open-mmlab/mmdeploy@3f8604b csrc/mmdeploy/backend_ops/onnxruntime/grid_sample/grid_sample.cpp,
// itself PyTorch's aten/src/ATen/native/GridSampler.cpp). Every step is rounded to float32 as the
// kernel computes it (Math.fround), so that nearest's ties and floor() decide as the kernel does.
//
//   ix = unnormalize(grid[n, h, w, 0], W), iy = unnormalize(grid[n, h, w, 1], H)
//     align_corners 1: ((g + 1) / 2) * (size - 1);  0: ((g + 1) * size - 1) / 2
//   padding (bilinear, nearest: on ix, iy; bicubic: on every integer tap):
//     zeros: as is; border: clip to [0, size - 1];
//     reflection: reflect about the edges (align_corners 1: pixel centres 0 and size - 1;
//                 0: pixel edges -0.5 and size - 0.5), then clip
//   bilinear: the four neighbours floor(ix) + {0, 1}, floor(iy) + {0, 1}, weights as products of
//             the per-axis distances, summed in the order nw, ne, sw, se; outside ones skipped
//   nearest: nearbyint (half to even) of ix, iy; 0 outside
//   bicubic: the 4 x 4 taps around floor(ix), floor(iy) of the unpadded coordinates, each tap
//            padded; cubic convolution with A = -0.75 along x per row, then along y
//
// params: input (default 'x'), grid (default 'grid'), output (default 'y'), interpolationMode
// (0 bilinear, 1 nearest, 2 bicubic), paddingMode (0 zeros, 1 border, 2 reflection), alignCorners
// (0/1), quantize (optional: grid values become floor(g * quantize) / quantize first, as
// the tie tests' models compute them). A 5-D input (with a 5-D grid of (x, y, z)) samples trilinear or nearest.

const f = Math.fround;

function unnormalize(coord, size, alignCorners) {
  return alignCorners ? f(f(f(coord + 1) / 2) * (size - 1)) : f(f(f(f(coord + 1) * size) - 1) / 2);
}

function clip(value, size) {
  return Math.min(size - 1, Math.max(value, 0));
}

function reflect(value, twiceLow, twiceHigh) {
  if (twiceLow === twiceHigh) return 0;
  const min = f(twiceLow / 2);
  const span = f((twiceHigh - twiceLow) / 2);
  const distance = Math.abs(f(value - min));
  const extra = distance % span; // fmod of two floats is exact
  const flips = Math.floor(f(distance / span));
  return flips % 2 === 0 ? f(extra + min) : f(f(span - extra) + min);
}

function pad(value, size, paddingMode, alignCorners) {
  if (paddingMode === 1) return clip(value, size);
  if (paddingMode === 2) {
    const reflected = alignCorners ? reflect(value, 0, 2 * (size - 1)) : reflect(value, -1, 2 * size - 1);
    return clip(reflected, size);
  }
  return value;
}

function nearbyint(value) {
  const low = Math.floor(value);
  const fraction = value - low;
  if (fraction > 0.5) return low + 1;
  if (fraction < 0.5) return low;
  return low % 2 === 0 ? low : low + 1;
}

const A = -0.75;
const convolution1 = (x) => f(f(f(f(f(f(A + 2) * x) - f(A + 3)) * x) * x) + 1);
const convolution2 = (x) => f(f(f(f(f(f(A * x) - f(5 * A)) * x) + f(8 * A)) * x) - f(4 * A));

function cubic(x0, x1, x2, x3, t) {
  const c0 = convolution2(f(t + 1));
  const c1 = convolution1(t);
  const x2t = f(1 - t);
  const c2 = convolution1(x2t);
  const c3 = convolution2(f(x2t + 1));
  return f(f(f(f(x0 * c0) + f(x1 * c1)) + f(x2 * c2)) + f(x3 * c3));
}

// 5-D (the TensorRT plugin's grid_sampler_3d, = torch's): input [N, C, D, H, W], grid
// [N, D_out, H_out, W_out, 3] of (x, y, z); bilinear (trilinear) or nearest.
function gridSampler3d(x, grid, mode, paddingMode, alignCorners) {
  const [N, C, D, H, W] = x.dims;
  const [, outD, outH, outW] = grid.dims;
  const X = x.data;
  const G = grid.data;
  const inside = (zz, yy, xx) => zz >= 0 && zz < D && yy >= 0 && yy < H && xx >= 0 && xx < W;
  const out = new Float32Array(N * C * outD * outH * outW);
  const points = outD * outH * outW;
  for (let n = 0; n < N; n++) {
    for (let p = 0; p < points; p++) {
      const g = (n * points + p) * 3;
      const ix = pad(unnormalize(G[g], W, alignCorners), W, paddingMode, alignCorners);
      const iy = pad(unnormalize(G[g + 1], H, alignCorners), H, paddingMode, alignCorners);
      const iz = pad(unnormalize(G[g + 2], D, alignCorners), D, paddingMode, alignCorners);
      for (let c = 0; c < C; c++) {
        const at = (zz, yy, xx) => X[(((n * C + c) * D + zz) * H + yy) * W + xx];
        let result = 0;
        if (mode === 0) {
          const [x0, y0, z0] = [Math.floor(ix), Math.floor(iy), Math.floor(iz)];
          // tnw, tne, tsw, tse, bnw, bne, bsw, bse: weights (x distance) * (y distance) * (z distance)
          for (const dz of [0, 1]) {
            for (const dy of [0, 1]) {
              for (const dx of [0, 1]) {
                const wx = dx ? f(ix - x0) : f(x0 + 1 - ix);
                const wy = dy ? f(iy - y0) : f(y0 + 1 - iy);
                const wz = dz ? f(iz - z0) : f(z0 + 1 - iz);
                const weight = f(f(wx * wy) * wz);
                if (inside(z0 + dz, y0 + dy, x0 + dx)) result = f(result + f(at(z0 + dz, y0 + dy, x0 + dx) * weight));
              }
            }
          }
        } else if (mode === 1) {
          const [xn, yn, zn] = [nearbyint(ix), nearbyint(iy), nearbyint(iz)];
          result = inside(zn, yn, xn) ? at(zn, yn, xn) : 0;
        } else {
          throw new Error(`grid_sampler: interpolation_mode ${mode} is not defined for 5-D inputs`);
        }
        out[(n * C + c) * points + p] = result;
      }
    }
  }
  return { dims: [N, C, outD, outH, outW], data: out, type: 'float32' };
}

module.exports = function gridSampler(inputs, params = {}) {
  const x = inputs[params.input ?? 'x'];
  const grid = inputs[params.grid ?? 'grid'];
  if (!x || !grid) throw new Error(`grid_sampler: needs inputs x and grid (got ${Object.keys(inputs).join(', ')})`);
  const mode = params.interpolationMode ?? 0;
  const paddingMode = params.paddingMode ?? 0;
  const alignCorners = Boolean(params.alignCorners ?? 0);
  if (x.dims.length === 5 && grid.dims.length === 5 && grid.dims[4] === 3) {
    return { [params.output ?? 'y']: gridSampler3d(x, grid, mode, paddingMode, alignCorners) };
  }
  const [N, C, H, W] = x.dims;
  const [gridN, outH, outW, two] = grid.dims;
  if (x.dims.length !== 4 || grid.dims.length !== 4 || gridN !== N || two !== 2) {
    throw new Error(`grid_sampler: x [${x.dims}] and grid [${grid.dims}] are not [N, C, H, W] and [N, H_out, W_out, 2]`);
  }
  const X = x.data;
  // params.quantize = q: the test model feeds Floor(grid * q) / q (exact in float32).
  const G = params.quantize ? grid.data.map((g) => Math.floor(f(g * params.quantize)) / params.quantize) : grid.data;
  const inside = (yy, xx) => yy >= 0 && yy < H && xx >= 0 && xx < W;
  const y = new Float32Array(N * C * outH * outW);
  for (let n = 0; n < N; n++) {
    for (let h = 0; h < outH; h++) {
      for (let w = 0; w < outW; w++) {
        const gx = G[((n * outH + h) * outW + w) * 2];
        const gy = G[((n * outH + h) * outW + w) * 2 + 1];
        const ix = pad(unnormalize(gx, W, alignCorners), W, paddingMode, alignCorners);
        const iy = pad(unnormalize(gy, H, alignCorners), H, paddingMode, alignCorners);
        for (let c = 0; c < C; c++) {
          const at = (yy, xx) => X[((n * C + c) * H + yy) * W + xx];
          let result = 0;
          if (mode === 0) {
            const x0 = Math.floor(ix);
            const y0 = Math.floor(iy);
            const corners = [
              [y0, x0, f(f(x0 + 1 - ix) * f(y0 + 1 - iy))],  // nw
              [y0, x0 + 1, f(f(ix - x0) * f(y0 + 1 - iy))],  // ne
              [y0 + 1, x0, f(f(x0 + 1 - ix) * f(iy - y0))],  // sw
              [y0 + 1, x0 + 1, f(f(ix - x0) * f(iy - y0))],  // se
            ];
            for (const [yy, xx, weight] of corners) {
              if (inside(yy, xx)) result = f(result + f(at(yy, xx) * weight));
            }
          } else if (mode === 1) {
            const xn = nearbyint(ix);
            const yn = nearbyint(iy);
            result = inside(yn, xn) ? at(yn, xn) : 0;
          } else if (mode === 2) {
            const ux = unnormalize(gx, W, alignCorners);
            const uy = unnormalize(gy, H, alignCorners);
            const x0 = Math.floor(ux);
            const y0 = Math.floor(uy);
            const tx = f(ux - x0);
            const ty = f(uy - y0);
            const value = (xx, yy) => {
              const px = Math.trunc(pad(xx, W, paddingMode, alignCorners));
              const py = Math.trunc(pad(yy, H, paddingMode, alignCorners));
              return inside(py, px) ? at(py, px) : 0;
            };
            const rows = [0, 1, 2, 3].map((i) => cubic(value(x0 - 1, y0 - 1 + i), value(x0, y0 - 1 + i),
              value(x0 + 1, y0 - 1 + i), value(x0 + 2, y0 - 1 + i), tx));
            result = cubic(rows[0], rows[1], rows[2], rows[3], ty);
          } else {
            throw new Error(`grid_sampler: interpolation_mode ${mode}`);
          }
          y[((n * C + c) * outH + h) * outW + w] = result;
        }
      }
    }
  }
  return { [params.output ?? 'y']: { dims: [N, C, outH, outW], data: y, type: 'float32' } };
};
