'use strict';
// Naive reference of TensorRT's EfficientNMS_TRT plugin, in plain loops, after
// NVIDIA/TensorRT@a892d22 plugin/efficientNMSPlugin/ (README.md, efficientNMSInference.cu/.cuh,
// efficientNMSPlugin.cpp); float32 steps as the kernels take them (Math.fround).
//
//   boxes [B, N, 4] | [B, N, 1, 4] | [B, N, C, 4]; scores [B, N, C] (| [B, N, C, 1]);
//   anchors [1 | B, N, 4] (optional: the fused box decoder).
//   1. candidates: (n, c) with score >= threshold (with score_activation: the raw score >=
//      logf(t / (1 - t)), or -32768 for t <= 0) and c != background_class;
//   2. sorted by score, descending; ties in element order n*C + c (the plugin's dense path; its
//      filter path leaves them unspecified); the first 5000 (maxCandidates) only;
//   3. greedy NMS in that order across classes: a candidate is dropped when a kept one of the
//      same class (any class with class_agnostic) has IoU >= iou_threshold; at most
//      max_output_boxes kept. IoU on corner boxes, both reordered with the plugin's arithmetic
//      swap (a > b: a = a - b; b = a + b; a = b - a), areas (x2 - x1) * (y2 - y1) (0 unless both
//      sides are positive), I / (area1 + area2 - I);
//   4. outputs: num_detections int32 [B, 1]; boxes in corner form (box_coding 1 converted:
//      (c0 - s0 * 0.5, c1 - s1 * 0.5, c0 + s0 * 0.5, c1 + s1 * 0.5)), not reordered; scores
//      (sigmoid of the raw score with score_activation); classes int32; padding all zeros.
//   Box decoding (3 inputs): both box and anchor reordered (corner coding), then corner:
//   box + anchor; center-size: (b0 * a2 + a0, b1 * a3 + a1, a2 * exp(b2), a3 * exp(b3)).
//
// params: the node's attributes by their names (score_threshold, iou_threshold,
// max_output_boxes, background_class, score_activation, box_coding, class_agnostic);
// maxCandidates (default 5000); input names boxes/scores/anchors (defaults 'boxes', 'scores',
// 'anchors'); output names (defaults num_detections, detection_boxes, detection_scores,
// detection_classes); quantizeScores / quantizeBoxes: q -> the test model feeds floor(v * q) / q;
// boxScale: [4] factors the test model multiplies the boxes by first; strictThresholds: compare
// with > instead of the plugin's >= (to show that a test's data meets the thresholds exactly);
// numType: 'int64' when the model declares num_detections int64.

const f = Math.fround;

function reorder(b) {  // BoxCorner::reorder on [y1, x1, y2, x2] (any axis order)
  let [y1, x1, y2, x2] = b;
  if (y1 > y2) { y1 = f(y1 - y2); y2 = f(y1 + y2); y1 = f(y2 - y1); }
  if (x1 > x2) { x1 = f(x1 - x2); x2 = f(x1 + x2); x1 = f(x2 - x1); }
  return [y1, x1, y2, x2];
}

function area(b) {
  const w = f(b[3] - b[1]), h = f(b[2] - b[0]);
  if (h <= 0 || w <= 0) return 0;
  return f(h * w);
}

function iou(a, b) {
  const A = reorder(a), B = reorder(b);
  const inter = area([A[0] > B[0] ? A[0] : B[0], A[1] > B[1] ? A[1] : B[1], A[2] < B[2] ? A[2] : B[2], A[3] < B[3] ? A[3] : B[3]]);
  if (inter <= 0) return 0;
  const union = f(f(area(A) + area(B)) - inter);
  if (union <= 0) return 0;
  return f(inter / union);
}

function corners(b, coding) {
  if (!coding) return b;
  const h2 = f(b[2] * 0.5), w2 = f(b[3] * 0.5);
  return [f(b[0] - h2), f(b[1] - w2), f(b[0] + h2), f(b[1] + w2)];
}

function decode(box, anchor, coding) {
  if (!coding) {
    const b = reorder(box), a = reorder(anchor);
    return [f(b[0] + a[0]), f(b[1] + a[1]), f(b[2] + a[2]), f(b[3] + a[3])];
  }
  return [f(f(box[0] * anchor[2]) + anchor[0]), f(f(box[1] * anchor[3]) + anchor[1]),
    f(anchor[2] * f(Math.exp(box[2]))), f(anchor[3] * f(Math.exp(box[3])))];
}

const quantized = (data, q) => (q ? data.map((v) => Math.floor(f(v * q)) / q) : data);
const scaled = (data, scale) => (scale ? data.map((v, i) => f(v * scale[i % 4])) : data);

module.exports = function efficientNMS(inputs, params = {}) {
  const boxesT = inputs[params.boxes ?? 'boxes'], scoresT = inputs[params.scores ?? 'scores'];
  const anchorsT = inputs[params.anchors ?? 'anchors'];
  const [B, N, C] = scoresT.dims;
  const perClass = boxesT.dims.length === 4 && boxesT.dims[2] !== 1 ;
  const boxData = scaled(quantized(boxesT.data, params.quantizeBoxes), params.boxScale), scoreData = quantized(scoresT.data, params.quantizeScores);
  const M = params.max_output_boxes, coding = params.box_coding ?? 0, agnostic = params.class_agnostic ?? 0;
  const activation = params.score_activation ?? 0, background = params.background_class ?? -1;
  const t = f(params.score_threshold);
  const threshold = activation ? (t <= 0 ? -32768 : f(Math.log(f(t / f(1 - t))))) : t;
  const iouThreshold = f(params.iou_threshold);
  const maxCandidates = params.maxCandidates ?? 5000;
  const raw = (b, n, c) => {
    const o = perClass ? ((b * N + n) * C + c) * 4 : (b * N + n) * 4;
    return Array.from(boxData.slice(o, o + 4));
  };
  const box = (b, n, c) => {  // DecodeBoxes: the corner box the plugin compares and writes
    let value = raw(b, n, c);
    if (anchorsT) {
      const ab = anchorsT.dims[0] === 1 ? 0 : b;
      value = decode(value, Array.from(anchorsT.data.slice((ab * N + n) * 4, (ab * N + n) * 4 + 4)), coding);
    }
    return corners(value, coding);
  };
  const out = { num: new Int32Array(B), boxes: new Float32Array(B * M * 4), scores: new Float32Array(B * M), classes: new Int32Array(B * M) };
  for (let b = 0; b < B; b++) {
    let candidates = [];
    for (let n = 0; n < N; n++) {
      for (let c = 0; c < C; c++) {
        const s = scoreData[(b * N + n) * C + c];
        if (c !== background && (params.strictThresholds ? s > threshold : s >= threshold)) candidates.push({ s, n, c, e: n * C + c });
      }
    }
    candidates.sort((p, q) => (q.s - p.s) || (p.e - q.e));
    candidates = candidates.slice(0, maxCandidates);
    const kept = [];
    const keptByClass = new Map();  // the kept ones a candidate is compared with: its class's, or all
    for (const cand of candidates) {
      if (kept.length >= M) break;
      const cb = box(b, cand.n, cand.c);
      const overlaps = (k) => (params.strictThresholds ? iou(cb, k.box) > iouThreshold : iou(cb, k.box) >= iouThreshold);
      const rivals = agnostic ? kept : (keptByClass.get(cand.c) ?? []);
      if (rivals.some(overlaps)) continue;
      const entry = { ...cand, box: cb };
      kept.push(entry);
      if (!agnostic) keptByClass.set(cand.c, [...rivals, entry]);
    }
    out.num[b] = kept.length;
    kept.forEach((k, i) => {
      out.boxes.set(k.box, (b * M + i) * 4);
      out.scores[b * M + i] = activation ? f(1 / (1 + Math.exp(-k.s))) : k.s;
      out.classes[b * M + i] = k.c;
    });
  }
  const name = (key, fallback) => params[key] ?? fallback;
  return {
    [name('numDetections', 'num_detections')]: params.numType === 'int64'
      ? { dims: [B, 1], data: BigInt64Array.from(out.num, (v) => BigInt(v)), type: 'int64' }
      : { dims: [B, 1], data: out.num, type: 'int32' },
    [name('detectionBoxes', 'detection_boxes')]: { dims: [B, M, 4], data: out.boxes, type: 'float32' },
    [name('detectionScores', 'detection_scores')]: { dims: [B, M], data: out.scores, type: 'float32' },
    [name('detectionClasses', 'detection_classes')]: { dims: [B, M], data: out.classes, type: 'int32' },
  };
};
