'use strict';
// Naive reference of mmcv's RoIAlign (the MMCVRoiAlign custom op), in plain loops, after the
// kernels open-mmlab/mmcv@a8073c7 mmcv/ops/csrc/pytorch/cpu/roi_align.cpp and
// mmcv/ops/csrc/common/cuda/roi_align_cuda_kernel.cuh (copied by mmdeploy's TensorRT plugin,
// csrc/mmdeploy/backend_ops/tensorrt/roi_align/trt_roi_align_kernel.cu):
//
//   for roi k = [b, x1, y1, x2, y2] (b truncated to an integer), offset = aligned ? 0.5 : 0:
//     start = (x1, y1) * scale - offset; size = (x2, y2) * scale - offset - start
//     not aligned: size = max(size, 1)          (legacy clamp, only then)
//     bin = size / (output_height, output_width)
//     grid = sampling_ratio > 0 ? sampling_ratio : ceil(size / output size)   (per axis)
//     sample (iy, ix) of bin (ph, pw): y = start_y + ph * bin_h + (iy + 0.5) * bin_h / grid_h (x alike)
//     bilinear(y, x): 0 if y < -1, y > H, x < -1 or x > W; else clamp to >= 0, the low corner
//       (int)y, at the last row/column both corners are that one, weights hy*hx, hy*lx, ly*hx, ly*lx
//     avg: sum / max(grid_h * grid_w, 1);  max: the largest sample (-FLT_MAX for an empty grid,
//       the CUDA / TensorRT kernels; mmcv's CPU kernel starts at -10000: params.maxInitial)
//
// params: input names ('input', and either 'rois' [K, 5] or 'batch' [K, 1] + 'boxes' [K, 4], or
// 'batch' + 'xy' [K, 2] + 'wh' [K, 2] with boxes [x, y, x + w, y + h] in float32, as the tests'
// models build them; floorSizes: w and h floored first), output (default 'y'), outputHeight, outputWidth, spatialScale,
// samplingRatio, mode ('avg' | 'max'), aligned (0/1), maxInitial (default -FLT_MAX).

const f = Math.fround;
const FLT_MAX = 3.4028234663852886e38;

function bilinear(plane, H, W, y, x) {
  if (y < -1 || y > H || x < -1 || x > W) return 0;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  let yLow = Math.trunc(y), xLow = Math.trunc(x), yHigh, xHigh;
  if (yLow >= H - 1) { yHigh = yLow = H - 1; y = yLow; } else yHigh = yLow + 1;
  if (xLow >= W - 1) { xHigh = xLow = W - 1; x = xLow; } else xHigh = xLow + 1;
  const ly = f(y - yLow), lx = f(x - xLow), hy = f(1 - ly), hx = f(1 - lx);
  return f(f(f(f(hy * hx) * plane[yLow * W + xLow]) + f(f(hy * lx) * plane[yLow * W + xHigh])) +
    f(f(ly * hx) * plane[yHigh * W + xLow])) + f(f(ly * lx) * plane[yHigh * W + xHigh]);
}

function roisOf(inputs, params) {
  if (inputs[params.rois ?? 'rois']) return Array.from(inputs[params.rois ?? 'rois'].data);
  const batch = inputs.batch.data;
  const K = batch.length;
  const rois = [];
  for (let k = 0; k < K; k++) {
    let box;
    if (inputs.boxes) box = Array.from(inputs.boxes.data.slice(k * 4, k * 4 + 4));
    else {
      const [x, y] = inputs.xy.data.slice(k * 2, k * 2 + 2);
      let [w, h] = inputs.wh.data.slice(k * 2, k * 2 + 2);
      if (params.floorSizes) [w, h] = [Math.floor(w), Math.floor(h)];
      box = [x, y, f(x + w), f(y + h)];
    }
    rois.push(batch[k], ...box);
  }
  return rois;
}

module.exports = function mmcvRoiAlign(inputs, params = {}) {
  const x = inputs[params.input ?? 'input'];
  const rois = roisOf(inputs, params);
  const [N, C, H, W] = x.dims;
  const oh = params.outputHeight, ow = params.outputWidth;
  const scale = f(params.spatialScale ?? 1), sr = params.samplingRatio ?? 0;
  const mode = params.mode ?? 'avg', aligned = Boolean(params.aligned ?? 1);
  const maxInitial = params.maxInitial ?? -FLT_MAX;
  const K = rois.length / 5;
  const out = new Float32Array(K * C * oh * ow);
  for (let k = 0; k < K; k++) {
    const [bf, rx1, ry1, rx2, ry2] = rois.slice(k * 5, k * 5 + 5);
    const b = Math.trunc(bf);
    if (b < 0 || b >= N) throw new Error(`roi ${k}: batch index ${bf} outside [0, ${N})`);
    const offset = aligned ? 0.5 : 0;
    const startW = f(f(rx1 * scale) - offset), startH = f(f(ry1 * scale) - offset);
    const endW = f(f(rx2 * scale) - offset), endH = f(f(ry2 * scale) - offset);
    let roiW = f(endW - startW), roiH = f(endH - startH);
    if (!aligned) { roiW = Math.max(roiW, 1); roiH = Math.max(roiH, 1); }
    const binH = f(roiH / oh), binW = f(roiW / ow);
    const gridH = sr > 0 ? sr : Math.ceil(f(roiH / oh)), gridW = sr > 0 ? sr : Math.ceil(f(roiW / ow));
    const count = Math.max(gridH * gridW, 1);
    for (let c = 0; c < C; c++) {
      const plane = x.data.subarray((b * C + c) * H * W, (b * C + c + 1) * H * W);
      for (let ph = 0; ph < oh; ph++) {
        for (let pw = 0; pw < ow; pw++) {
          let sum = 0, max = maxInitial;
          for (let iy = 0; iy < gridH; iy++) {
            const y = f(f(startH + f(ph * binH)) + f(f(f(iy + 0.5) * binH) / gridH));
            for (let ix = 0; ix < gridW; ix++) {
              const xx = f(f(startW + f(pw * binW)) + f(f(f(ix + 0.5) * binW) / gridW));
              const value = bilinear(plane, H, W, y, xx);
              sum = f(sum + value);
              if (value > max) max = value;
            }
          }
          out[((k * C + c) * oh + ph) * ow + pw] = mode === 'avg' ? f(sum / count) : max;
        }
      }
    }
  }
  return { [params.output ?? 'y']: { dims: [K, C, oh, ow], data: out, type: 'float32' } };
};
