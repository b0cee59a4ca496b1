'use strict';
// Naive reference of torchvision.ops.deform_conv2d (= ONNX DeformConv, = mmcv's deformable
// convolutions) in plain loops, after torchvision/csrc/ops/cpu/deform_conv2d_kernel.cpp:
//
//   y[n, m, oy, ox] = bias[m] + sum over c in m's group, kernel position (i, j):
//       weight[m, c % (C/groups), i, j] * mask[n, g*K + i*kw + j, oy, ox]
//       * bilinear(x[n, c], oy*stride_h - pad_top + i*dil_h + offset[n, g*2K + 2(i*kw + j), oy, ox],
//                           ox*stride_w - pad_left + j*dil_w + offset[n, g*2K + 2(i*kw + j) + 1, oy, ox])
//   with g = c / (C / offset_groups), K = kh*kw; bilinear is 0 when y <= -1, y >= H, x <= -1 or
//   x >= W, and each of the four corners outside the image counts as 0.
//
// params (all optional): input names {x, weight, offset, mask, bias} (defaults 'input', 'weight',
// 'offset', 'mask', 'bias'; a mask or bias not among the inputs is not used), output (default
// 'y'), stride [h, w], pad [top, left] (the begin pads; the output size is the offset's),
// dilation [h, w], groups, offsetGroups (default: from the offset's channels), useMask (default:
// whether the mask is an input).

function bilinear(image, offset, height, width, y, x) {
  if (y <= -1 || y >= height || x <= -1 || x >= width) return 0;
  const y0 = Math.floor(y);
  const x0 = Math.floor(x);
  const ly = y - y0;
  const lx = x - x0;
  const at = (yy, xx) => (yy >= 0 && yy < height && xx >= 0 && xx < width ? image[offset + yy * width + xx] : 0);
  return (1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x0 + 1) +
    ly * (1 - lx) * at(y0 + 1, x0) + ly * lx * at(y0 + 1, x0 + 1);
}

module.exports = function deformConv2d(inputs, params = {}) {
  const names = { x: 'input', weight: 'weight', offset: 'offset', mask: 'mask', bias: 'bias', ...params };
  const x = inputs[names.x];
  const weight = inputs[names.weight];
  const offset = inputs[names.offset];
  if (!x || !weight || !offset) {
    throw new Error(`deform_conv2d: needs inputs '${names.x}', '${names.weight}', '${names.offset}' (got ${Object.keys(inputs).join(', ')})`);
  }
  const mask = inputs[names.mask];
  const bias = inputs[names.bias];
  const useMask = params.useMask ?? Boolean(mask);
  if (useMask && !mask) throw new Error(`deform_conv2d: useMask without input '${names.mask}'`);

  const [N, C, H, W] = x.dims;
  const [M, channelsPerGroup, kh, kw] = weight.dims;
  const [, offsetChannels, outH, outW] = offset.dims;
  const [strideH, strideW] = params.stride ?? [1, 1];
  const [padTop, padLeft] = params.pad ?? [0, 0];
  const [dilH, dilW] = params.dilation ?? [1, 1];
  const groups = params.groups ?? C / channelsPerGroup;
  const K = kh * kw;
  const offsetGroups = params.offsetGroups ?? offsetChannels / (2 * K);
  if (channelsPerGroup * groups !== C || M % groups !== 0 || C % offsetGroups !== 0 || offsetChannels !== 2 * offsetGroups * K) {
    throw new Error(`deform_conv2d: inconsistent shapes x [${x.dims}], weight [${weight.dims}], offset [${offset.dims}], groups ${groups}, offset groups ${offsetGroups}`);
  }
  const outPerGroup = M / groups;
  const channelsPerOffsetGroup = C / offsetGroups;
  const plane = outH * outW;

  const y = new Float64Array(N * M * plane);
  for (let n = 0; n < N; n++) {
    for (let m = 0; m < M; m++) {
      const group = Math.floor(m / outPerGroup);
      for (let oy = 0; oy < outH; oy++) {
        for (let ox = 0; ox < outW; ox++) {
          let sum = bias ? bias.data[m] : 0;
          for (let cg = 0; cg < channelsPerGroup; cg++) {
            const c = group * channelsPerGroup + cg;
            const g = Math.floor(c / channelsPerOffsetGroup);
            for (let i = 0; i < kh; i++) {
              for (let j = 0; j < kw; j++) {
                const k = i * kw + j;
                const at = oy * outW + ox;
                const dy = offset.data[((n * offsetChannels) + g * 2 * K + 2 * k) * plane + at];
                const dx = offset.data[((n * offsetChannels) + g * 2 * K + 2 * k + 1) * plane + at];
                const modulation = useMask ? mask.data[((n * offsetGroups + g) * K + k) * plane + at] : 1;
                const value = bilinear(x.data, (n * C + c) * H * W, H, W,
                  oy * strideH - padTop + i * dilH + dy, ox * strideW - padLeft + j * dilW + dx);
                sum += weight.data[((m * channelsPerGroup + cg) * kh + i) * kw + j] * modulation * value;
              }
            }
          }
          y[(n * M + m) * plane + oy * outW + ox] = sum;
        }
      }
    }
  }
  return { [params.output ?? 'y']: { dims: [N, M, outH, outW], data: Float32Array.from(y), type: 'float32' } };
};
