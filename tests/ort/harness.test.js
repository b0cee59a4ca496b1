'use strict';
// Self-tests of the ORT harness: `node --test tests/ort/` (about 10 s; ctest runs it as
// OrtHarness.SelfTest). The corpus samples need the conformance data set (tests/ort/lib/test_data.js).

const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const tp = require('../../tools/ort-driver/lib/tensor_proto');
const { compareTensors } = require('./lib/tensor_compare');
const { readModel } = require('../../tools/ort-driver/lib/onnx_model');
const models = require('./lib/test_models');
const { testData } = require('./lib/test_data');

const HERE = __dirname;
const CONFORMANCE = testData('conformance');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ort-harness-'));
test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function writeModel(name, bytes) {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, bytes);
  return file;
}

function run(script, args) {
  const r = spawnSync(process.execPath, [path.join(HERE, script), ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const A = writeModel('add.onnx', models.addModel());
const ADD_OFF = writeModel('add_off.onnx', models.addModel({ offset: 1e-3 }));
const SUB = writeModel('sub.onnx', models.addModel({ op: 'Sub' }));
const BAD = writeModel('bad.onnx', models.unknownOpModel());
const ADD_Z = writeModel('add_unused_input.onnx', models.addModel({ unusedInput: true }));
const GELU = writeModel('gelu.onnx', models.spelledGeluModel());
const MIXED = writeModel('mixed.onnx', models.mixedTypesModel());
const LOOP = writeModel('loop.onnx', models.endlessLoopModel());

// ---- tensor_proto ----------------------------------------------------------------------------

const SAMPLES = {
  float32: Float32Array.of(1.5, -0, NaN, Infinity, 3.4e38),
  float64: Float64Array.of(Math.PI, -1e300, NaN),
  float16: Uint16Array.of(0x3c00, 0xfbff, 0x0001, 0x7e00),
  int8: Int8Array.of(-128, 127, 0),
  uint8: Uint8Array.of(0, 255),
  int16: Int16Array.of(-32768, 32767),
  uint16: Uint16Array.of(65535, 1),
  int32: Int32Array.of(-2147483648, 2147483647),
  uint32: Uint32Array.of(4294967295, 7),
  int64: BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, -1n),
  uint64: BigUint64Array.of(2n ** 64n - 1n, 0n),
  bool: Uint8Array.of(1, 0, 1),
  string: ['', 'héllo', 'x'],
};

test('TensorProto round-trips every ORT-node dtype through raw, packed and unpacked fields', () => {
  for (const [type, data] of Object.entries(SAMPLES)) {
    const t = { name: `t_${type}`, type, dims: [1, data.length], data };
    for (const opts of [{}, { raw: false }, { raw: false, packed: false }]) {
      const back = tp.decodeTensor(tp.encodeTensor(t, opts));
      assert.strictEqual(back.type, type);
      assert.strictEqual(back.name, t.name);
      assert.deepStrictEqual(back.dims, t.dims);
      if (type === 'float32' || type === 'float64') {
        assert.deepStrictEqual(Array.from(back.data, String), Array.from(data, String), `${type} ${JSON.stringify(opts)}`);
      } else {
        assert.deepStrictEqual(Array.from(back.data), Array.from(data), `${type} ${JSON.stringify(opts)}`);
      }
      const ortTensor = tp.toOrtTensor(back);
      assert.deepStrictEqual(Array.from(tp.fromOrtTensor(ortTensor).data, String), Array.from(back.data, String));
    }
  }
});

test('Sequence and Optional protos decode', () => {
  const x = { type: 'float32', dims: [2], data: Float32Array.of(1, 2) };
  const seq = tp.decodeSequence(tp.encodeSequence({ name: 's', values: [x, x] }));
  assert.strictEqual(seq.values.length, 2);
  assert.deepStrictEqual(Array.from(seq.values[1].data), [1, 2]);
  assert.strictEqual(tp.decodeOptional(tp.encodeOptional({ name: 'o', value: null })).value, null);
  assert.deepStrictEqual(tp.decodeOptional(tp.encodeOptional({ value: x })).value.dims, [2]);
});

test('float16 conversion rounds to nearest even and keeps specials', () => {
  const cases = [[1, 0x3c00], [-2, 0xc000], [65504, 0x7bff], [65520, 0x7c00], [2 ** -24, 0x0001],
    [2 ** -26, 0x0000], [1 + 2 ** -11, 0x3c00], [1 + 3 * 2 ** -11, 0x3c02], [Infinity, 0x7c00], [-0, 0x8000]];
  for (const [v, bits] of cases) assert.strictEqual(tp.floatToHalf(v), bits, `floatToHalf(${v})`);
  assert.ok(Number.isNaN(tp.halfToFloat(tp.floatToHalf(NaN))));
  for (let h = 0; h < 0x7c00; h += 97) assert.strictEqual(tp.floatToHalf(tp.halfToFloat(h)), h);
});

test('random tensors are deterministic per seed and respect ranges', () => {
  const a = tp.randomTensor('float32', [100], tp.makeRng(7), { float: [2, 3] });
  const b = tp.randomTensor('float32', [100], tp.makeRng(7), { float: [2, 3] });
  assert.deepStrictEqual(a.data, b.data);
  assert.ok(a.data.every((v) => v >= 2 && v < 3));
  const i = tp.randomTensor('int64', [200], tp.makeRng(1), { int: [-2, 2] });
  assert.deepStrictEqual(new Set(Array.from(i.data, Number)), new Set([-2, -1, 0, 1, 2]));
});

// ---- comparison ------------------------------------------------------------------------------

test('compareTensors: tolerance, NaN, infinities, exact ints and strings', () => {
  const f = (...v) => ({ type: 'float32', dims: [v.length], data: Float32Array.from(v) });
  assert.ok(compareTensors(f(1, NaN, Infinity), f(1.0005, NaN, Infinity), { rtol: 1e-3, atol: 0 }).ok);
  assert.ok(!compareTensors(f(1), f(1.01), { rtol: 1e-3, atol: 0 }).ok);
  assert.ok(!compareTensors(f(NaN), f(0)).ok);
  assert.ok(!compareTensors(f(Infinity), f(-Infinity)).ok);
  assert.ok(!compareTensors(f(Infinity), f(3e38), { rtol: 1 }).ok);
  const bad = compareTensors(f(0, 1, 2), f(0, 1, 3), { rtol: 0, atol: 0.5 });
  assert.deepStrictEqual([bad.ok, bad.index, bad.expected, bad.got, bad.max_abs], [false, 2, 2, 3, 1]);
  const i64 = (...v) => ({ type: 'int64', dims: [v.length], data: BigInt64Array.from(v) });
  assert.ok(!compareTensors(i64(2n ** 62n), i64(2n ** 62n + 1n), { atol: 10 }).ok);
  assert.ok(!compareTensors({ type: 'string', dims: [1], data: ['a'] }, { type: 'string', dims: [1], data: ['b'] }).ok);
  assert.match(compareTensors(f(1, 2), { ...f(1, 2), dims: [2, 1] }).message, /shape/);
  assert.match(compareTensors(f(1), { type: 'float64', dims: [1], data: Float64Array.of(1) }).message, /dtype/);
});

test('compareTensors: a NaN or infinity where the expected value is finite fails; non-finite counts', () => {
  const f = (...v) => ({ type: 'float32', dims: [v.length], data: Float32Array.from(v) });
  for (const bad of [NaN, Infinity, -Infinity]) {
    const c = compareTensors(f(1, 2, 3), f(1, bad, 3), { rtol: 1e9, atol: 1e9 });
    assert.strictEqual(c.ok, false, String(bad));
    assert.deepStrictEqual([c.index, c.nonfinite_expected, c.nonfinite_got], [1, 0, 1]);
  }
  const same = compareTensors(f(NaN, 1, -Infinity), f(NaN, 1, -Infinity));
  assert.deepStrictEqual([same.ok, same.nonfinite_expected, same.nonfinite_got], [true, 2, 2]);
  const f16 = { type: 'float16', dims: [2], data: Uint16Array.of(0x3c00, 0x3c00) };
  assert.strictEqual(compareTensors(f16, { ...f16, data: Uint16Array.of(0x3c00, 0x7e00) }).ok, false);
  // An expected output with no finite element proves nothing: it fails unless allowed.
  const broken = compareTensors(f(NaN, Infinity), f(NaN, Infinity));
  assert.strictEqual(broken.ok, false);
  assert.match(broken.message, /no finite element/);
  assert.ok(compareTensors(f(NaN, Infinity), f(NaN, Infinity), { allowNonfiniteExpected: true }).ok);
  assert.ok(compareTensors(f(), f()).ok, 'an empty tensor is not "entirely non-finite"');
});

// ---- scripts ---------------------------------------------------------------------------------

test('load.js: 0 when ORT loads, 1 with its message when not, 2 on usage errors', () => {
  assert.strictEqual(run('load.js', [A]).code, 0);
  const bad = run('load.js', [BAD]);
  assert.strictEqual(bad.code, 1);
  assert.match(bad.stdout, /NoSuchOp/);
  assert.strictEqual(bad.stdout.trim().split('\n').length, 1);
  assert.strictEqual(run('load.js', []).code, 2);
  assert.strictEqual(run('load.js', [A, '--nope']).code, 2);
});

test('compare.js exit codes: same 0, different 1, broken model 2, missing dim 2', () => {
  assert.strictEqual(run('compare.js', [A, A, '--dim', 'N=4']).code, 0);
  const off = run('compare.js', [A, ADD_OFF, '--dim', 'N=4', '--json']);
  assert.strictEqual(off.code, 1);
  const report = JSON.parse(off.stdout);
  assert.strictEqual(report.ok, false);
  assert.ok(Math.abs(report.outputs[0].max_abs - 1e-3) < 1e-5);
  assert.strictEqual(run('compare.js', [A, ADD_OFF, '--dim', 'N=4', '--atol', '2e-3']).code, 0);
  assert.strictEqual(run('compare.js', [A, SUB, '--shape', 'A=2,3']).code, 1);
  const broken = run('compare.js', [A, BAD, '--dim', 'N=1', '--json']);
  assert.strictEqual(broken.code, 2);
  assert.match(JSON.parse(broken.stdout).error, /model B .* failed to load.*NoSuchOp/);
  const nodim = run('compare.js', [A, A]);
  assert.strictEqual(nodim.code, 2);
  assert.match(nodim.stderr, /symbolic 'N'.*--dim N=/);
  assert.strictEqual(run('compare.js', [A, A, '--dim', 'N=2', '--range', 'Z=0,1']).code, 2);
  assert.strictEqual(run('compare.js', [MIXED, MIXED, '--int-range', '-5,5', '--float-range', '-100,100']).code, 0);
  // B's input that nothing reads gets zeros; A must have every input B reads.
  assert.strictEqual(run('compare.js', [A, ADD_Z, '--dim', 'N=2']).code, 0);
  assert.match(run('compare.js', [GELU, A]).stderr, /B has an input A does not have: A/);
});

test('compare.js --reference: naive registry name or module file', () => {
  assert.strictEqual(run('compare.js', [A, '--reference', 'add', '--dim', 'N=3']).code, 0);
  const file = path.join(HERE, 'lib/naive/add.js');
  assert.strictEqual(run('compare.js', [A, '--reference', file, '--params', '{"a":"A","b":"B","output":"C"}', '--dim', 'N=2']).code, 0);
  // A reference that computes something else must be caught.
  const sub = path.join(tmp, 'sub_ref.js');
  fs.writeFileSync(sub, `module.exports = (i) => ({ C: { dims: i.A.dims, data: i.A.data.map((v, k) => v - i.B.data[k % 3]) } });\n`);
  assert.strictEqual(run('compare.js', [A, '--reference', sub, '--dim', 'N=2']).code, 1);
  // A reference that gives NaN everywhere: the candidate matching it proves nothing.
  const nan = path.join(tmp, 'nan_ref.js');
  fs.writeFileSync(nan, `module.exports = (i) => ({ C: { dims: i.A.dims, data: i.A.data.map(() => NaN) } });\n`);
  const broken = run('compare.js', [A, '--reference', nan, '--dim', 'N=2', '--json']);
  assert.strictEqual(broken.code, 1);
  assert.match(JSON.parse(broken.stdout).outputs[0].message, /no finite element/);
  // A finite reference and a candidate with one NaN: counted, and a failure.
  const oneNan = path.join(tmp, 'one_nan_ref.js');
  fs.writeFileSync(oneNan, `module.exports = (i) => ({ C: { dims: i.A.dims, data: i.A.data.map((v, k) => (k ? v + i.B.data[k % 3] : NaN)) } });\n`);
  const text = run('compare.js', [A, '--reference', oneNan, '--dim', 'N=2', '--trials', '1']);
  assert.strictEqual(text.code, 1);
  assert.match(text.stdout, /nonfinite expected 1 got 0/);
});

test('optimize.js: extended level fuses a spelled-out GELU into com.microsoft Gelu', () => {
  const out = path.join(tmp, 'gelu_opt.onnx');
  const r = run('optimize.js', [GELU, out, '--level', 'extended', '--json']);
  assert.strictEqual(r.code, 0, r.stderr);
  const report = JSON.parse(r.stdout);
  assert.ok(report.ms > 0 && report.max_rss_kb > 0);
  const ops = readModel(out).graph.nodes.map((n) => `${n.domain}:${n.opType}`);
  assert.deepStrictEqual(ops, ['com.microsoft:Gelu']);
  assert.strictEqual(run('compare.js', [GELU, out, '--level', 'disabled', '--rtol', '1e-5', '--atol', '1e-6']).code, 0);
  assert.strictEqual(run('optimize.js', [GELU, out]).code, 2);
  assert.strictEqual(run('optimize.js', [BAD, out, '--level', 'basic']).code, 1);
});

// A conformance-style case for the add model: C = A + B with A [2,3] and B [3].
function makeAddCase() {
  const dir = path.join(tmp, 'case_add');
  const set = path.join(dir, 'test_data_set_0');
  fs.mkdirSync(set, { recursive: true });
  fs.copyFileSync(A, path.join(dir, 'model.onnx'));
  const a = Float32Array.of(1, 2, 3, 4, 5, 6);
  const b = Float32Array.of(0.5, -1, 10);
  // Typed, unpacked fields on purpose: the runner must not depend on raw_data.
  fs.writeFileSync(path.join(set, 'input_0.pb'), tp.encodeTensor({ type: 'float32', dims: [2, 3], data: a }, { raw: false, packed: false }));
  fs.writeFileSync(path.join(set, 'input_1.pb'), tp.encodeTensor({ name: 'B', type: 'float32', dims: [3], data: b }));
  fs.writeFileSync(path.join(set, 'output_0.pb'), tp.encodeTensor({ type: 'float32', dims: [2, 3], data: a.map((v, i) => v + b[i % 3]) }));
  return dir;
}

function makeLoopCase() {
  const dir = path.join(tmp, 'case_loop');
  const set = path.join(dir, 'test_data_set_0');
  fs.mkdirSync(set, { recursive: true });
  fs.copyFileSync(LOOP, path.join(dir, 'model.onnx'));
  fs.writeFileSync(path.join(set, 'input_0.pb'), tp.encodeTensor({ type: 'float32', dims: [1], data: Float32Array.of(0) }));
  fs.writeFileSync(path.join(set, 'output_0.pb'), tp.encodeTensor({ type: 'float32', dims: [1], data: Float32Array.of(1e12) }));
  return dir;
}

test('conformance.js: pass, mismatch, load_error, timeout, in job order', () => {
  const addCase = makeAddCase();
  const jobs = [
    { case: addCase },
    { case: addCase, model: SUB },
    { case: addCase, model: BAD },
    { case: addCase, model: path.join(tmp, 'missing.onnx') },
    { case: makeLoopCase() },
    { case: addCase, model: ADD_OFF, atol: 2e-3 },
    { case: addCase, model: ADD_Z },
  ];
  const jobsFile = path.join(tmp, 'jobs.json');
  const outFile = path.join(tmp, 'results.json');
  fs.writeFileSync(jobsFile, JSON.stringify(jobs));
  const r = run('conformance.js', ['--jobs', jobsFile, '--out', outFile, '--timeout', '3']);
  assert.strictEqual(r.code, 0, r.stderr);
  const results = JSON.parse(fs.readFileSync(outFile, 'utf8'));
  assert.deepStrictEqual(results.map((x) => x.status), ['pass', 'mismatch', 'load_error', 'load_error', 'run_error', 'pass', 'pass']);
  assert.deepStrictEqual([results[1].output, results[1].at, results[1].expected, results[1].got], ['C', [0, 0], 1.5, 0.5]);
  assert.match(results[2].message, /NoSuchOp/);
  assert.match(results[4].message, /timeout/);
  assert.match(r.stderr, /7 cases: 3 pass, 1 mismatch, 2 load_error, 1 run_error, 0 unsupported/);
  assert.strictEqual(run('conformance.js', []).code, 2);
  assert.strictEqual(run('conformance.js', ['--jobs', jobsFile, '--workers', '0']).code, 2);
});

test('conformance.js on corpus samples', { skip: CONFORMANCE.optedOut && CONFORMANCE.missing }, () => {
  assert.ok(!CONFORMANCE.missing, CONFORMANCE.missing);
  const names = ['node/test_abs', 'node/test_cast_FLOAT_to_FLOAT16', 'node/test_optional_get_element_optional_tensor',
    'node/test_sequence_insert_at_back', 'node/test_cast_FLOAT_to_INT4', 'pytorch-converted/test_AvgPool1d',
    'pytorch-converted/test_ConvTranspose2d', 'simple/test_expand_shape_model1', 'light/light_squeezenet.onnx'];
  const jobsFile = path.join(tmp, 'corpus_jobs.json');
  fs.writeFileSync(jobsFile, JSON.stringify(names.map((n) => ({ case: path.join(CONFORMANCE.dir, n) }))));
  const r = run('conformance.js', ['--jobs', jobsFile]);
  assert.strictEqual(r.code, 0, r.stderr);
  assert.deepStrictEqual(JSON.parse(r.stdout).map((x) => x.status),
    ['pass', 'pass', 'pass', 'unsupported', 'unsupported', 'load_error', 'pass', 'pass', 'pass']);
});

test('opset_matrix.js --check: below the committed figures, a WRONG case, a page quoting another table all fail', () => {
  const bin = path.join(process.env.BUILD_DIR || path.resolve(HERE, '../../build'), 'onnx-rewrite');
  assert.ok(fs.existsSync(bin), `no ${bin}: build first`);
  const dir = path.join(tmp, 'matrix');
  fs.cpSync(makeAddCase(), path.join(dir, 'corpus', 'node', 'test_add'), { recursive: true });
  const doc = path.join(dir, 'matrix.md');
  const page = path.join(dir, 'page.md');
  const quote = '<!-- opset-matrix: a test -->\n<!-- /opset-matrix -->\n';
  fs.writeFileSync(page, quote);
  const matrix = (...args) => run('opset_matrix.js', ['--bin', bin, '--corpus', path.join(dir, 'corpus'), ...args]);
  assert.strictEqual(matrix('--opsets', '11', '--markdown', doc, '--table-in', page).code, 0);
  const written = fs.readFileSync(doc, 'utf8');
  assert.match(written, /^\| 11 \| 1 \(100\.0 %\) \| 1 \| 0 \(0\.0 %\) \| 0 \|$/m);
  assert.ok(fs.readFileSync(page, 'utf8').includes('| 11 | 1 (100.0 %) | 1 |'));
  assert.strictEqual(matrix('--check', doc).code, 0);

  fs.writeFileSync(doc, written.replace('| 11 | 1 (100.0 %) | 1 |', '| 11 | 2 (100.0 %) | 1 |'));
  const below = matrix('--check', doc);
  assert.strictEqual(below.code, 1);
  assert.match(below.stdout, /FAILED against .*: 11: converted 1, below the committed 2/);
  assert.match(below.stdout, /page\.md quotes another table than/);

  fs.writeFileSync(doc, written);
  fs.writeFileSync(page, quote);
  assert.match(matrix('--check', doc).stdout, /page\.md quotes another table than/);

  // A tool that writes another model than it says: SUB in place of every rewritten one.
  matrix('--opsets', '11', '--markdown', doc, '--table-in', page);
  const liar = path.join(dir, 'liar.sh');
  fs.writeFileSync(liar, `#!/bin/sh\n"${bin}" "$@"; status=$?\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n` +
    `for m in "$out"/*/model.onnx; do cp "${SUB}" "$m"; done\nexit $status\n`);
  fs.chmodSync(liar, 0o755);
  const wrong = run('opset_matrix.js', ['--bin', liar, '--corpus', path.join(dir, 'corpus'), '--check', doc]);
  assert.strictEqual(wrong.code, 1);
  assert.match(wrong.stdout, /11: 1 WRONG \(node\/test_add\)/);
});

// ---- quantized references (rules/qlinear-to-qdq, rules/dynamic-quant-matmul) ----------------

test('quantized references: round half to even, saturation, broadcasting, QGemm and MatMulIntegerToFloat by hand', () => {
  const qm = require('../../rules/qlinear-to-qdq/quant_math');
  const q = require('../../rules/qlinear-to-qdq/qlinear_reference');
  const mm = require('../../rules/dynamic-quant-matmul/quant_matmul_reference');
  assert.deepStrictEqual([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 2.5001].map(qm.rne), [0, 2, 2, 0, -2, 2, 3]);
  assert.deepStrictEqual([qm.saturate(300, 'uint8'), qm.saturate(-129, 'int8'), qm.saturate(-5, 'uint8')], [255, -128, 0]);
  const t = (type, dims, values) => qm.tensor(type, dims, values);
  const s = (v) => t('float32', [], [v]);
  // QLinearAdd with all scales 1: a + b - zero points, broadcast [2, 2] + [2], saturated.
  const [add] = q.QLinearAdd({ attrs: {} }, [t('uint8', [2, 2], [1, 2, 250, 3]), s(1), t('uint8', [], [0]),
    t('uint8', [2], [10, 20]), s(1), t('uint8', [], [0]), s(1), t('uint8', [], [0])]);
  assert.deepStrictEqual([Array.from(add.data), add.dims], [[11, 22, 255, 23], [2, 2]]);
  // QGemm, per-column b scale and zero point, C, quantized output: by hand.
  // A = [[1, 2]] (zp 0), B = [[1, 2], [3, 4]] with b_zp [1, 0], b_scale [1, 0.5], C = [10, 0], y_scale 1, y_zp 0:
  // acc = [1·0 + 2·2 + 10, 1·2 + 2·4] = [14, 10]; y = [14·1, 10·0.5] = [14, 5].
  const [y] = q.QGemm({ attrs: {} }, [t('uint8', [1, 2], [1, 2]), s(1), t('uint8', [], [0]), t('int8', [2, 2], [1, 2, 3, 4]),
    t('float32', [2], [1, 0.5]), t('int8', [2], [1, 0]), t('int32', [2], [10, 0]), s(1), t('uint8', [], [0])]);
  assert.deepStrictEqual(Array.from(y.data), [14, 5]);
  // A one-step tie: acc 5 with scale 0.5 -> 2.5 rounds to 2 (even), 7 · 0.5 = 3.5 -> 4.
  const [tie] = q.QGemm({ attrs: {} }, [t('uint8', [2, 1], [5, 7]), s(0.5), t('uint8', [], [0]), t('int8', [1, 1], [1]),
    s(1), t('int8', [], [0]), null, s(1), t('uint8', [], [0])]);
  assert.deepStrictEqual(Array.from(tie.data), [2, 4]);
  // MatMulIntegerToFloat: f32(acc · a_scale · b_scale) + bias.
  const [f] = mm.MatMulIntegerToFloat({ attrs: {} }, [t('uint8', [1, 2], [3, 4]), t('int8', [2, 1], [-1, 2]), s(0.5), s(2), null, null,
    t('float32', [1], [0.25])]);
  assert.deepStrictEqual(Array.from(f.data), [5.25]);
  // DynamicQuantizeLinear: [-1, 0, 3] -> scale 4/255, zp round(255/4) = 64.
  const [dq, scale, zp] = mm.DynamicQuantizeLinear({ attrs: {} }, [t('float32', [3], [-1, 0, 3])]);
  assert.deepStrictEqual([Array.from(dq.data), zp.data[0], scale.data[0]], [[0, 64, 255], 64, Math.fround(4 / 255)]);
});
