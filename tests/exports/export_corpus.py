#!/usr/bin/env python3
"""Exports the real-export corpus (issue #34) into a cache directory, in ONNX backend-test layout.

    python3 tests/exports/export_corpus.py build/exports [--slice] [--match REGEX] [--opsets 9-17]
                                             [--big] [--external-above-mb 100] [--jobs 1] [--list]

Each case is one model exported by PyTorch's own exporter (torch.onnx.export, TorchScript-based, as
in Debian 12's python3-torch 1.13) at one opset, with random weights from a fixed seed:

    CACHE/<model>-op<N>/model.onnx                  (and model.onnx.data: weights above the threshold)
    CACHE/<model>-op<N>/test_data_set_0/input_K.pb  serialized TensorProto, K-th graph input
    CACHE/<model>-op<N>/test_data_set_0/output_K.pb PyTorch's own output: the oracle
    CACHE/.stamps/<model>-op<N>.json                what made the case, or why it did not export
    CACHE/manifest.json                             every (model, opset) of the last run: exported or the
                                                    error ("complete": false while a run is under way)

A case is reused while its stamp matches: the hash of this file and of the module defining the
model, the torch/torchvision/onnx versions and the options that change the files. Anything else
re-exports it. See tests/exports/README.md.
"""

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
APT_PACKAGES = 'python3-torch python3-torchvision python3-onnx python3-numpy'
SYSTEM_PYTHON = '/usr/bin/python3'  # Debian's, where apt puts torch; tried after `python3`


def _find_python():
    """Re-executes under Debian's Python when this one can't import torch (a pyenv/venv python3
    on PATH); fails with what to install when none can."""
    try:
        for module in ('torch', 'torchvision', 'onnx', 'numpy'):
            importlib.import_module(module)
        return
    except ImportError as err:
        missing = err.name or str(err)
    tried = [sys.executable]
    if (os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)
            and not os.environ.get('EXPORT_CORPUS_REEXEC')):
        os.environ['EXPORT_CORPUS_REEXEC'] = sys.executable
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    if os.environ.get('EXPORT_CORPUS_REEXEC'):
        tried.insert(0, os.environ['EXPORT_CORPUS_REEXEC'])
    sys.stderr.write(f'export_corpus.py: error: no Python that can import torch, torchvision, onnx and numpy '
                     f'(tried {", ".join(tried)}; missing: {missing}). On Debian 12, as root: '
                     f'apt-get install {APT_PACKAGES}\n')
    sys.exit(2)


_find_python()

import argparse  # noqa: E402
import fcntl  # noqa: E402
import hashlib  # noqa: E402
import multiprocessing  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
import zlib  # noqa: E402
import contextlib  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, HERE)
import models_custom_ops  # noqa: E402
import models_detection  # noqa: E402
import models_transformers  # noqa: E402
import models_vision  # noqa: E402

MODULES = [models_vision, models_detection, models_transformers, models_custom_ops]
ALL_OPSETS = list(range(9, 18))
STAMP_VERSION = 1


def file_hash(path):
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def all_cases():
    cases = []
    for module in MODULES:
        for case in module.cases():
            case.module_file = os.path.abspath(module.__file__.replace('.pyc', '.py'))
            cases.append(case)
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f'export_corpus.py: error: duplicate case names {sorted(dupes)}')
    return cases


def parse_opsets(text):
    opsets = set()
    for part in text.split(','):
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part.strip())
        if not m:
            raise argparse.ArgumentTypeError(f'bad opset list {text!r} (e.g. 9-17 or 9,13,17)')
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        opsets.update(range(lo, hi + 1))
    bad = [o for o in opsets if o not in ALL_OPSETS]
    if bad:
        raise argparse.ArgumentTypeError(f'opsets {bad}: torch {torch.__version__} exports 9..17 here')
    return sorted(opsets)


# ---- flattening of inputs and outputs, as torch.onnx does -------------------------------------

def flatten(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten(v)]
    if value is None:
        return []
    raise TypeError(f'cannot flatten {type(value).__name__}')


ONNX_OF_NUMPY = {np.dtype(k): v for k, v in [
    ('float32', onnx.TensorProto.FLOAT), ('float64', onnx.TensorProto.DOUBLE), ('float16', onnx.TensorProto.FLOAT16),
    ('int64', onnx.TensorProto.INT64), ('int32', onnx.TensorProto.INT32), ('int8', onnx.TensorProto.INT8),
    ('uint8', onnx.TensorProto.UINT8), ('bool', onnx.TensorProto.BOOL)]}


def tensor_proto(t, name):
    array = t.detach().cpu().contiguous().numpy()
    proto = onnx.numpy_helper.from_array(array, name)
    return proto.SerializeToString()


# ---- one case ---------------------------------------------------------------------------------

def case_key(case, script_hash, options):
    """What a case's files depend on; a stamp with another key is stale."""
    h = hashlib.sha256()
    h.update(script_hash.encode())
    h.update(file_hash(case.module_file).encode())
    h.update(json.dumps({'torch': torch.__version__, 'torchvision': torchvision.__version__, 'onnx': onnx.__version__,
                         'numpy': np.__version__, 'stamp': STAMP_VERSION, **options}, sort_keys=True).encode())
    return h.hexdigest()


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7fffffff


@contextlib.contextmanager
def captured_warnings():
    """Collects the exporter's Python warnings (and keeps them off the terminal)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        yield caught


def one_line(err):
    text = f'{type(err).__name__}: {err}'.strip()
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    first = lines[0] if lines else type(err).__name__
    return first[:400]


def export_bytes_or_dir(export, opset, tmp_dir):
    """torch.onnx.export into tmp_dir/export.onnx; returns the loaded ModelProto (external data
    read in when torch wrote any: models over 2 GB)."""
    path = os.path.join(tmp_dir, 'export.onnx')
    torch.onnx.export(export.model, export.args, path, opset_version=opset, input_names=export.input_names,
                      output_names=export.output_names, dynamic_axes=export.dynamic_axes or None,
                      **export.kwargs)
    model = onnx.load(path)  # also loads external data written beside it
    return model, path


def check_export(model, export, flat_inputs, flat_outputs, opset):
    """The graph must take the inputs we feed and give the outputs we store, in order."""
    imports = {o.domain: o.version for o in model.opset_import}
    if imports.get('', imports.get('ai.onnx')) != opset:
        raise RuntimeError(f'the model imports ai.onnx {imports.get("")}, asked for {opset}')
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    feeds = []
    for gi in graph_inputs:
        if gi.name not in export.input_names:
            raise RuntimeError(f'graph input {gi.name!r} is none of the input names {export.input_names}')
        feeds.append((gi, flat_inputs[export.input_names.index(gi.name)]))
    if len(model.graph.output) != len(flat_outputs):
        raise RuntimeError(f'the graph has {len(model.graph.output)} outputs, PyTorch returned {len(flat_outputs)}')
    for go, t in zip(model.graph.output, flat_outputs):
        tt = go.type.tensor_type
        want = ONNX_OF_NUMPY.get(np.dtype(t.detach().numpy().dtype))
        if tt.elem_type and want is not None and tt.elem_type != want:
            raise RuntimeError(f'output {go.name!r}: graph says {onnx.TensorProto.DataType.Name(tt.elem_type)}, '
                               f'PyTorch returned {t.dtype}')
        if tt.HasField('shape') and len(tt.shape.dim) != t.dim():
            raise RuntimeError(f'output {go.name!r}: graph rank {len(tt.shape.dim)}, PyTorch returned rank {t.dim()}')
    dropped = [n for n in export.input_names if n not in {gi.name for gi in graph_inputs}]
    return feeds, dropped


def initializer_bytes(model):
    total = 0
    for init in model.graph.initializer:
        total += len(init.raw_data) if init.HasField('raw_data') else init.ByteSize()
    return total


def write_case(cache, case_name, model, torch_path, feeds, flat_outputs, external_above):
    """Writes CACHE/case_name atomically (a .partial directory renamed into place)."""
    final = os.path.join(cache, case_name)
    partial = final + '.partial'
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(os.path.join(partial, 'test_data_set_0'))
    weights = initializer_bytes(model)
    external = weights > external_above
    torch_files = os.listdir(os.path.dirname(torch_path))
    if external:
        onnx.save_model(model, os.path.join(partial, 'model.onnx'), save_as_external_data=True,
                        all_tensors_to_one_file=True, location='model.onnx.data', size_threshold=1024)
    elif torch_files == ['export.onnx']:
        shutil.copyfile(torch_path, os.path.join(partial, 'model.onnx'))  # exactly what torch wrote
    else:
        onnx.save_model(model, os.path.join(partial, 'model.onnx'))
    for k, (gi, t) in enumerate(feeds):
        with open(os.path.join(partial, 'test_data_set_0', f'input_{k}.pb'), 'wb') as f:
            f.write(tensor_proto(t, gi.name))
    for k, (go, t) in enumerate(zip(model.graph.output, flat_outputs)):
        with open(os.path.join(partial, 'test_data_set_0', f'output_{k}.pb'), 'wb') as f:
            f.write(tensor_proto(t, go.name))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(partial, final)
    return external, weights


def share_weights(cache, case_name, stamps_dir, base):
    """Weights are the same at every opset: a data file equal to another opset's becomes a hard
    link to it, so the corpus holds each big model's weights once."""
    data = os.path.join(cache, case_name, 'model.onnx.data')
    if not os.path.exists(data):
        return None
    digest = file_hash(data)
    for other in sorted(os.listdir(cache)):
        if other == case_name or not re.fullmatch(re.escape(base) + r'-op\d+', other):
            continue
        other_data = os.path.join(cache, other, 'model.onnx.data')
        stamp_file = os.path.join(stamps_dir, f'{other}.json')
        if not (os.path.exists(other_data) and os.path.exists(stamp_file)):
            continue
        with open(stamp_file) as f:
            if json.load(f).get('data_sha256') != digest:
                continue
        if os.stat(other_data).st_ino == os.stat(data).st_ino:
            break
        tmp = data + '.link'
        if os.path.exists(tmp):
            os.unlink(tmp)
        os.link(other_data, tmp)
        os.replace(tmp, data)
        break
    return digest


def export_case(case, opsets, cache, stamps_dir, key_of, options, log):
    todo = []
    for opset in opsets:
        stamp_file = os.path.join(stamps_dir, f'{case.name}-op{opset}.json')
        if os.path.exists(stamp_file):
            with open(stamp_file) as f:
                stamp = json.load(f)
            exported_ok = stamp.get('status') != 'exported' or os.path.exists(
                os.path.join(cache, f'{case.name}-op{opset}', 'model.onnx'))
            if stamp.get('key') == key_of(case) and exported_ok:
                continue
        todo.append(opset)
    if not todo:
        log(f'{case.name}: cached ({len(opsets)} opsets)')
        return 0

    t0 = time.time()
    torch.manual_seed(seed_of(case.name))
    np.random.seed(seed_of(case.name))
    try:
        with captured_warnings():
            export = case.build()
            export.model.eval()
            with torch.no_grad():
                outputs = export.model(*export.args)
    except Exception as err:  # the model can't even run: every opset fails the same way
        reason = f'building or running the model in PyTorch failed: {one_line(err)}'
        for opset in todo:
            write_stamp(stamps_dir, case, opset, key_of(case), {'status': 'failed', 'stage': 'pytorch', 'reason': reason})
        log(f'{case.name}: FAILED in PyTorch: {reason}')
        return len(todo)
    flat_inputs = flatten(export.args)
    flat_outputs = flatten(outputs)
    build_seconds = time.time() - t0

    for opset in todo:
        case_name = f'{case.name}-op{opset}'
        tmp_dir = os.path.join(cache, '.tmp', case_name)
        shutil.rmtree(tmp_dir, ignore_errors=True)
        os.makedirs(tmp_dir)
        t1 = time.time()
        info = {'opset': opset}
        try:
            with captured_warnings() as caught:
                model, torch_path = export_bytes_or_dir(export, opset, tmp_dir)
            info['export_warnings'] = sorted({str(w.message).splitlines()[0][:300] for w in caught})[:20]
            feeds, dropped = check_export(model, export, flat_inputs, flat_outputs, opset)
            shutil.rmtree(os.path.join(cache, case_name), ignore_errors=True)
            external, weights = write_case(cache, case_name, model, torch_path, feeds, flat_outputs,
                                           options['external_above_mb'] * 1e6)
            ops = {}
            for node in model.graph.node:
                op = node.op_type if node.domain in ('', 'ai.onnx') else f'{node.domain}::{node.op_type}'
                ops[op] = ops.get(op, 0) + 1
            info.update({'status': 'exported', 'external_data': external, 'weight_bytes': weights,
                         'inputs': [{'name': gi.name, 'shape': list(t.shape), 'dtype': str(t.dtype).replace('torch.', '')}
                                    for gi, t in feeds],
                         'outputs': [{'name': go.name, 'shape': list(t.shape), 'dtype': str(t.dtype).replace('torch.', '')}
                                     for go, t in zip(model.graph.output, flat_outputs)],
                         'dropped_inputs': dropped, 'ops': dict(sorted(ops.items())),
                         'opset_imports': {o.domain or 'ai.onnx': o.version for o in model.opset_import},
                         'seconds': round(time.time() - t1 + build_seconds / len(todo), 1)})
            write_stamp(stamps_dir, case, opset, key_of(case), info)  # data hash filled in below
            if external:
                info['data_sha256'] = share_weights(cache, case_name, stamps_dir, case.name) or None
                write_stamp(stamps_dir, case, opset, key_of(case), info)
            log(f'{case_name}: exported ({time.time() - t1:.1f} s{", external data" if external else ""})')
        except Exception as err:
            shutil.rmtree(os.path.join(cache, case_name), ignore_errors=True)
            info.update({'status': 'failed', 'stage': 'export', 'reason': one_line(err)})
            if os.environ.get('EXPORT_CORPUS_DEBUG'):
                traceback.print_exc()
            write_stamp(stamps_dir, case, opset, key_of(case), info)
            log(f'{case_name}: not exported: {info["reason"]}')
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    del export, outputs
    return len(todo)


def write_stamp(stamps_dir, case, opset, key, info):
    stamp = {'case': f'{case.name}-op{opset}', 'model': case.name, 'family': case.family, 'key': key,
             'torch': torch.__version__, 'torchvision': torchvision.__version__, 'notes': case.notes,
             'input_desc': case.input_desc, 'rewrite_args': case.rewrite_args, **info}
    tmp = os.path.join(stamps_dir, f'.{case.name}-op{opset}.json.tmp')
    with open(tmp, 'w') as f:
        json.dump(stamp, f, indent=1)
    os.replace(tmp, os.path.join(stamps_dir, f'{case.name}-op{opset}.json'))


def write_manifest(cache, stamps_dir, cases, opsets, keys):
    """manifest.json: the stamp of every selected (model, opset) that is up to date (exported, or
    failed with its reason). Written after each model, so that conversion_matrix.py can run on the
    models done while the others export."""
    entries = []
    for case in cases:
        for opset in opsets:
            path = os.path.join(stamps_dir, f'{case.name}-op{opset}.json')
            if not os.path.exists(path):
                continue
            with open(path) as f:
                stamp = json.load(f)
            if stamp.pop('key', None) != keys[case.name]:
                continue
            stamp['selected'] = True
            entries.append(stamp)
    manifest = {'torch': torch.__version__, 'torchvision': torchvision.__version__, 'onnx': onnx.__version__,
                'complete': False, 'cases': entries}
    return manifest


def save_manifest(cache, manifest):
    tmp = os.path.join(cache, '.manifest.json.tmp')
    with open(tmp, 'w') as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(cache, 'manifest.json'))


def log(msg):
    print(f'[{time.strftime("%H:%M:%S")}] {msg}', flush=True)


_WORK = []  # (index, count, case, ...) per model; forked workers read it, so no closure is pickled


def _export_one(index):
    i, n, case, opsets, cache, stamps_dir, key, options = _WORK[index]
    log(f'({i + 1}/{n}) {case.name}')
    return export_case(case, opsets, cache, stamps_dir, lambda _case: key, options, log)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('cache', help='cache directory (in the build tree, e.g. build/exports)')
    parser.add_argument('--slice', action='store_true',
                        help='the CI slice: a few conv nets, every transformer block and the seed custom-op exports, at opsets 9, 11, 14, 17')
    parser.add_argument('--match', help='only models whose name matches this regular expression')
    parser.add_argument('--opsets', type=parse_opsets, help='opsets to export at (default 9-17; the slice: 9,11,14,17)')
    parser.add_argument('--big', action='store_true', help='also the models marked big (see --list): over 1 GB of weights each')
    parser.add_argument('--external-above-mb', type=float, default=100,
                        help='weights above this many MB go to model.onnx.data, shared by the opsets (default 100)')
    parser.add_argument('--jobs', '-j', type=int, default=1,
                        help='models exported at once, each in its own process (default 1; the exporter uses one core)')
    parser.add_argument('--list', action='store_true', help='list the models and exit')
    args = parser.parse_args()

    cases = all_cases()
    if args.slice:
        cases = [c for c in cases if c.slice]
    if not args.big:
        cases = [c for c in cases if not c.big]
    if args.match:
        cases = [c for c in cases if re.search(args.match, c.name)]
    opsets = args.opsets or ([9, 11, 14, 17] if args.slice else ALL_OPSETS)
    if args.list:
        for c in all_cases():
            flags = ','.join(f for f, on in (('slice', c.slice), ('big', c.big)) if on)
            print(f'{c.name:40s} {c.family:28s} {c.input_desc:28s} {flags}')
        return 0
    if not cases:
        sys.stderr.write('export_corpus.py: error: no model selected\n')
        return 2

    cache = os.path.abspath(args.cache)
    stamps_dir = os.path.join(cache, '.stamps')
    os.makedirs(stamps_dir, exist_ok=True)
    lock = open(os.path.join(cache, '.lock'), 'w')
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.stderr.write(f'export_corpus.py: error: another export_corpus.py is writing {args.cache}\n')
        return 2
    script_hash = file_hash(os.path.abspath(__file__)) + file_hash(os.path.join(HERE, 'corpus.py'))
    options = {'external_above_mb': args.external_above_mb}
    keys = {}

    def key_of(case):
        if case.name not in keys:
            keys[case.name] = case_key(case, script_hash, options)
        return keys[case.name]

    if args.jobs < 1:
        parser.error('--jobs must be at least 1')
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.jobs))
    t0 = time.time()
    _WORK[:] = [(i, len(cases), case, opsets, cache, stamps_dir, key_of(case), options) for i, case in enumerate(cases)]
    keys = {case.name: key_of(case) for case in cases}
    done = 0
    if args.jobs == 1:
        for i in range(len(_WORK)):
            done += _export_one(i)
            save_manifest(cache, write_manifest(cache, stamps_dir, cases, opsets, keys))
    else:
        # fork: the workers inherit the registered symbolics and the imported modules; each exports
        # whole models (all their opsets), so the weights shared between opsets stay in one process.
        with multiprocessing.get_context('fork').Pool(args.jobs, maxtasksperchild=1) as pool:
            for made in pool.imap_unordered(_export_one, range(len(_WORK))):
                done += made
                save_manifest(cache, write_manifest(cache, stamps_dir, cases, opsets, keys))
    try:
        os.rmdir(os.path.join(cache, '.tmp'))  # each case removes its own; empty unless another run is under way
    except OSError:
        pass
    manifest = write_manifest(cache, stamps_dir, cases, opsets, keys)
    manifest['complete'] = True
    save_manifest(cache, manifest)
    entries = manifest['cases']
    exported = sum(e['status'] == 'exported' for e in entries)
    log(f'{len(cases)} models x {len(opsets)} opsets: {exported} cases exported, '
        f'{len(entries) - exported} did not export (reasons in {os.path.join(args.cache, "manifest.json")}); '
        f'{done} (re)made in {time.time() - t0:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
