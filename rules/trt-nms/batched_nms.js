'use strict';
// Naive reference of TensorRT's BatchedNMS_TRT / BatchedNMSDynamic_TRT plugin (variant 'trt',
// NVIDIA/TensorRT@d0faf30 release/10.16 plugin/batchedNMSPlugin/ and plugin/common/kernels/
// sortScoresPerClass.cu, allClassNMS.cu, sortScoresPerImage.cu, gatherNMSOutputs.cu) and of
// mmdeploy's fork of it, TRTBatchedNMS (variant 'mmdeploy', open-mmlab/mmdeploy@3f8604b
// csrc/mmdeploy/backend_ops/tensorrt/batched_nms/ and common_impl/nms/), in plain loops.
//
//   boxes [B, N, L, 4] (L = 1: shared by all classes; L = C: one box per class), scores [B, N, C].
//   per image, per class c != background: the scores > score threshold (strict), sorted
//   descending (stable: ties -> lower box index), the first topK of them; greedy NMS in that
//   order, a box dropped when IoU with a kept one > iou threshold (strict); then every class's
//   kept boxes sorted by score (stable: ties -> lower class, then the rank within the class); the
//   first keepTopK. IoU:
//     'trt': both boxes min/max-reordered; isNormalized: plain; else (caffeSemantics, default)
//            widths and heights + 1, and a disjoint pair (strictly apart) intersects in 1 x 1;
//            isNormalized = 0 with caffeSemantics = 0: intersection plain, areas with + 1;
//     'mmdeploy': plain, not reordered: a box with x2 < x1 or y2 < y1 has area 0 and
//            overlaps nothing.
//   topK: 'trt' as given; 'mmdeploy': topk if 0 < topk <= N, else N.
//   outputs 'trt': num_detections int32 [B, 1], nmsed_boxes [B, K, 4] (clamped to [0, 1] when
//     clipBoxes, default on), nmsed_scores [B, K], nmsed_classes float [B, K]; padding 0, 0, -1.
//   outputs 'mmdeploy': dets [B, K, 5] = box (clamped when clip_boxes) and score, labels int32
//     [B, K], index int32 [B, K] (n for shared boxes, c*N + n per class); padding 0, -1, -1.
//
// params: variant; the node's attributes by their names ('trt': shareLocation,
// backgroundLabelId, numClasses, topK, keepTopK, scoreThreshold, iouThreshold, isNormalized,
// clipBoxes, caffeSemantics; 'mmdeploy': background_label_id, num_classes, topk, keep_topk,
// score_threshold, iou_threshold, clip_boxes); outputs: {num, boxes, scores, classes} or {dets,
// labels, index} names (defaults as the plugins name them); boxesFrom: 'xywh' -> the test model
// builds boxes [B, N, L, 4] as Concat(xy, xy + wh) from inputs xy and wh; quantizeScores,
// quantizeBoxes: q (the model feeds floor(v * q) / q; boxes: xy and wh); labelsType: 'int64' when
// the model declares labels int64; inclusiveThresholds: >= instead of the plugins' > (to show
// that a test's data meets the thresholds exactly); numRank1: num_detections declared [B].

const f = Math.fround;

function iouTrt(a, b, normalized, caffe) {
  const r = (x) => [Math.min(x[0], x[2]), Math.min(x[1], x[3]), Math.max(x[0], x[2]), Math.max(x[1], x[3])];
  const A = r(a), B = r(b);
  const disjoint = B[0] > A[2] || B[2] < A[0] || B[1] > A[3] || B[3] < A[1];
  const I = disjoint ? [0, 0, 0, 0] : [Math.max(A[0], B[0]), Math.max(A[1], B[1]), Math.min(A[2], B[2]), Math.min(A[3], B[3])];
  const plusOne = !normalized && caffe;
  const iw = plusOne ? f(f(I[2] - I[0]) + 1) : f(I[2] - I[0]);
  const ih = plusOne ? f(f(I[3] - I[1]) + 1) : f(I[3] - I[1]);
  if (!(iw > 0 && ih > 0)) return 0;
  const size = (x) => {
    if (x[2] < x[0] || x[3] < x[1]) return 0;
    const w = f(x[2] - x[0]), h = f(x[3] - x[1]);
    return normalized ? f(w * h) : f(f(w + 1) * f(h + 1));
  };
  const inter = f(iw * ih);
  return f(inter / f(f(size(A) + size(B)) - inter));
}

function iouMmdeploy(A, B) {
  const disjoint = B[0] > A[2] || B[2] < A[0] || B[1] > A[3] || B[3] < A[1];
  const I = disjoint ? [0, 0, 0, 0] : [Math.max(A[0], B[0]), Math.max(A[1], B[1]), Math.min(A[2], B[2]), Math.min(A[3], B[3])];
  const iw = f(I[2] - I[0]), ih = f(I[3] - I[1]);
  if (!(iw > 0 && ih > 0)) return 0;
  const size = (x) => (x[2] < x[0] || x[3] < x[1] ? 0 : f(f(x[2] - x[0]) * f(x[3] - x[1])));
  const inter = f(iw * ih);
  return f(inter / f(f(size(A) + size(B)) - inter));
}

module.exports = function batchedNMS(inputs, params = {}) {
  const mm = params.variant === 'mmdeploy';
  const scoresT = inputs.scores;
  const [B, N, C] = scoresT.dims;
  const scores = params.quantizeScores ? scoresT.data.map((v) => Math.floor(f(v * params.quantizeScores)) / params.quantizeScores) : scoresT.data;
  let boxData, L;
  const q = (data, steps) => (steps ? data.map((v) => Math.floor(f(v * steps)) / steps) : data);
  if (params.boxesFrom === 'xywh') {
    const xy = { ...inputs.xy, data: q(inputs.xy.data, params.quantizeBoxes) }, wh = { ...inputs.wh, data: q(inputs.wh.data, params.quantizeBoxes) };
    L = xy.dims[2];
    boxData = new Float32Array(B * N * L * 4);
    for (let i = 0; i < B * N * L; i++) {
      boxData[i * 4] = xy.data[i * 2];
      boxData[i * 4 + 1] = xy.data[i * 2 + 1];
      boxData[i * 4 + 2] = f(xy.data[i * 2] + wh.data[i * 2]);
      boxData[i * 4 + 3] = f(xy.data[i * 2 + 1] + wh.data[i * 2 + 1]);
    }
  } else {
    boxData = inputs.boxes.data;
    L = inputs.boxes.dims[2];
  }
  const p = (trtName, mmName, fallback) => params[mm ? mmName : trtName] ?? fallback;
  const background = p('backgroundLabelId', 'background_label_id', -1);
  const topKParam = p('topK', 'topk', -1);
  const topK = mm ? (topKParam > 0 && topKParam <= N ? topKParam : N) : topKParam;
  const keep = p('keepTopK', 'keep_topk');
  const scoreThreshold = f(p('scoreThreshold', 'score_threshold'));
  const iouThreshold = f(p('iouThreshold', 'iou_threshold'));
  const clip = Boolean(p('clipBoxes', 'clip_boxes', 1));
  const normalized = Boolean(params.isNormalized), caffe = Boolean(params.caffeSemantics ?? 1);
  const iou = mm ? iouMmdeploy : (a, b) => iouTrt(a, b, normalized, caffe);

  const num = new Int32Array(B), outBoxes = new Float32Array(B * keep * 4), outScores = new Float32Array(B * keep);
  const classes = new Float32Array(B * keep).fill(-1), labels = new Int32Array(B * keep).fill(-1), index = new Int32Array(B * keep).fill(-1);
  for (let b = 0; b < B; b++) {
    const all = [];
    for (let c = 0; c < C; c++) {
      if (c === background) continue;
      const box = (n) => { const o = ((b * N + n) * L + (L === 1 ? 0 : c)) * 4; return Array.from(boxData.slice(o, o + 4)); };
      let list = [];
      for (let n = 0; n < N; n++) {
        const s = scores[(b * N + n) * C + c];
        if (params.inclusiveThresholds ? s >= scoreThreshold : s > scoreThreshold) list.push({ s, n, c });
      }
      list.sort((x, y) => (y.s - x.s) || (x.n - y.n));
      list = list.slice(0, topK);
      const kept = [];
      const overlaps = (a, b) => (params.inclusiveThresholds ? iou(a, b) >= iouThreshold : iou(a, b) > iouThreshold);
      for (const e of list) if (kept.every((k) => !overlaps(box(k.n), box(e.n)))) kept.push({ ...e, box: box(e.n) });
      kept.forEach((e, rank) => all.push({ ...e, rank }));
    }
    all.sort((x, y) => (y.s - x.s) || (x.c - y.c) || (x.rank - y.rank));
    const chosen = all.slice(0, keep);
    num[b] = chosen.length;
    chosen.forEach((e, i) => {
      outBoxes.set(clip ? e.box.map((v) => Math.min(Math.max(v, 0), 1)) : e.box, (b * keep + i) * 4);
      outScores[b * keep + i] = e.s;
      classes[b * keep + i] = e.c;
      labels[b * keep + i] = e.c;
      index[b * keep + i] = L === 1 ? e.n : e.c * N + e.n;
    });
  }
  const names = params.outputs ?? {};
  if (mm) {
    const dets = new Float32Array(B * keep * 5);
    for (let i = 0; i < B * keep; i++) {
      dets.set(outBoxes.slice(i * 4, i * 4 + 4), i * 5);
      dets[i * 5 + 4] = outScores[i];
    }
    return {
      [names.dets ?? 'dets']: { dims: [B, keep, 5], data: dets, type: 'float32' },
      [names.labels ?? 'labels']: params.labelsType === 'int64'
        ? { dims: [B, keep], data: BigInt64Array.from(labels, (v) => BigInt(v)), type: 'int64' }
        : { dims: [B, keep], data: labels, type: 'int32' },
      [names.index ?? 'index']: { dims: [B, keep], data: index, type: 'int32' },
    };
  }
  return {
    [names.num ?? 'num_detections']: { dims: params.numRank1 ? [B] : [B, 1], data: num, type: 'int32' },
    [names.boxes ?? 'nmsed_boxes']: { dims: [B, keep, 4], data: outBoxes, type: 'float32' },
    [names.scores ?? 'nmsed_scores']: { dims: [B, keep], data: outScores, type: 'float32' },
    [names.classes ?? 'nmsed_classes']: { dims: [B, keep], data: classes, type: 'float32' },
  };
};
