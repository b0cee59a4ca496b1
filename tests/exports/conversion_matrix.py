#!/usr/bin/env python3
"""The conversion matrix over the real-export corpus (issue #34).

    python3 tests/exports/conversion_matrix.py build/exports [--bin build/onnx-rewrite]
        [--work build/exports-matrix] [--targets 7-21] [--match REGEX] [--jobs 2]
        [--markdown docs/real-export-matrix.md] [--no-opset-flag] [--rtol 1e-3] [--atol 1e-7]

For every case export_corpus.py exported (its manifest's selection) and every target opset T other
than the case's own:

    onnx-rewrite rewrite CASE/model.onnx -o OUT --to-opset T --report R.json
    onnx-rewrite rewrite CASE/model.onnx -o OUT --opset T      (T below the case's own; ORT runs it
                                                                only when its output differs)
    onnx-rewrite rewrite CASE/model.onnx -o OUT                (once: the plain rewrite, "=")

then ONNX Runtime (tests/ort/conformance.js, rtol 1e-3 / atol 1e-7 as the conformance corpus)
on every output written, against PyTorch's outputs. Each (case, variant) is

    ok             exit 0, the output imports ai.onnx T (--opset: at most T), ORT reproduces PyTorch
    refused        exit 1 (the reasons the tool printed are kept)
    WRONG          exit 0, and ORT refuses the output or computes other numbers, or the import is not T
    crash          any other exit (2, 3, a signal), or exit 0 without an output
    baseline-fail  the case's own export does not reproduce PyTorch in ORT (an exporter or ORT
                   problem, not the converter's): its outputs are not judged, unless they pass

An export that misses PyTorch only by rounding (max abs error at most 1e-4) is judged, with its
conversions, at atol = 10 x its own error instead.

Also kept: a refused case whose written output ORT can't run while the original runs
("refused-bad-output", counted as refused). Results are cached per case in WORK/results (keyed by
the case's files, the tool binary, the functions of this script that make a result, the targets
and the tolerances), so an interrupted run resumes and a changed page costs nothing.
Exit 1 when any WRONG or crash, 0 otherwise; 2 on a usage or harness error.
"""

import argparse
import concurrent.futures
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFORMANCE_JS = os.path.join(ROOT, 'tests', 'ort', 'conformance.js')
RESULT_VERSION = 1
CLASSES = ['ok', 'refused', 'WRONG', 'crash', 'baseline-fail']
BASELINE_ATOL_CAP = 1e-4  # the largest export error a case's atol is raised to 10 x of


class HarnessError(Exception):
    pass


def sha256_file(path, h=None):
    h = h or hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 22), b''):
            h.update(block)
    return h


def model_digest(model_path):
    """The model file and its external data (model.onnx.data beside it, as the corpus and the tool
    write it)."""
    h = sha256_file(model_path)
    data = os.path.join(os.path.dirname(model_path), 'model.onnx.data')
    if os.path.exists(data):
        sha256_file(data, h)
    return h.hexdigest()


def parse_targets(text):
    out = set()
    for part in text.split(','):
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', part.strip())
        if not m:
            raise argparse.ArgumentTypeError(f'bad opset list {text!r}')
        out.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return sorted(out)


def load_cases(cache, match):
    manifest_path = os.path.join(cache, 'manifest.json')
    if not os.path.exists(manifest_path):
        raise HarnessError(f'{manifest_path} not found: run tests/exports/export_corpus.py {cache} first')
    with open(manifest_path) as f:
        manifest = json.load(f)
    entries = [e for e in manifest['cases'] if e.get('selected')]
    if match:
        entries = [e for e in entries if re.search(match, e['case'])]
    cases = []
    for e in entries:
        if e['status'] != 'exported':
            continue
        model = os.path.join(cache, e['case'], 'model.onnx')
        if not os.path.exists(model):
            raise HarnessError(f'{model} is missing though the manifest says it was exported: re-run export_corpus.py')
        cases.append(e)
    return manifest, entries, cases


# ---- running the tool ---------------------------------------------------------------------------

def reasons_of(stderr, notes):
    """The per-node lines of a refusal ("Flatten x1 (main graph) keeps it there as it is: ...",
    "custom.deform_conv2d x1 (main graph): domain custom is not loadable ...") without the count and
    place, so equal reasons group; without any, the note saying why the import can't move, else the
    lines that say something."""
    lines = [l.rstrip() for l in stderr.splitlines() if l.strip()]
    per_op = []
    for line in lines:
        m = re.match(r'^\s+(\S+) x\d+ \(([^)]*)\):?\s*(.*)$', line)
        if m:
            per_op.append(f'{m.group(1)}: {m.group(3)}'.strip())
    if per_op:
        return sorted(set(per_op))
    moved = [n for n in notes if re.search(r"can't be (lowered|raised)", n)]
    if moved:
        return [f'(no node named on stderr; the note:) {n}' for n in moved]
    return [l.strip() for l in lines if not l.startswith('onnx-rewrite: target')][:5] or [l.strip() for l in lines[:1]]


def run_tool(bin_path, model, out_dir, options, extra_args):
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, 'model.onnx')
    report = os.path.join(out_dir, 'report.json')
    cmd = [bin_path, 'rewrite', model, '-o', out, '--report', report] + options + extra_args
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors='replace')
    result = {'exit': proc.returncode, 'seconds': round(time.time() - t0, 2),
              'stderr': proc.stderr.strip()[-4000:], 'output': os.path.exists(out)}
    if os.path.exists(report):
        try:
            with open(report) as f:
                rep = json.load(f)
            result['status'] = rep.get('status')
            for change in rep.get('opset_changes') or []:
                if change.get('domain') in ('ai.onnx', ''):
                    result['opset_after'] = change.get('after')
            notes = rep.get('notes') or []
            result['notes'] = notes[:5]
            # "RULE left node 'NAME' as it was: WHY": the lowering/raising rules that matched and declined
            left = set()
            for note in notes:
                m = re.match(r"^(\S+) left node '.*' as it was: (.*)$", note)
                if m:
                    left.add(f'{m.group(1)}: {m.group(2)}')
            if left:
                result['rules_left'] = sorted(left)
            result['rules'] = {r['id']: r['matches'] for r in rep.get('rules') or [] if r.get('matches')}
        except (OSError, ValueError) as err:
            result['report_error'] = str(err)
    if proc.returncode == 1:
        result['reasons'] = reasons_of(proc.stderr, result.get('notes') or [])
    elif proc.returncode != 0:
        result['reasons'] = [proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                             else f'exit {proc.returncode} with nothing on stderr']
    return result


def run_ort(jobs, work, name, workers, rtol, atol):
    """jobs: [{case, model}] -> the conformance.js result per job, in order."""
    if not jobs:
        return []
    jobs_file = os.path.join(work, f'{name}-jobs.json')
    out_file = os.path.join(work, f'{name}-ort.json')
    with open(jobs_file, 'w') as f:
        json.dump(jobs, f)
    proc = subprocess.run(['node', CONFORMANCE_JS, '--jobs', jobs_file, '--out', out_file, '--workers', str(workers),
                           '--rtol', str(rtol), '--atol', str(atol)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors='replace')
    if proc.returncode != 0:
        raise HarnessError(f'conformance.js exited {proc.returncode}: {proc.stderr.strip()[-2000:]}')
    with open(out_file) as f:
        results = json.load(f)
    os.unlink(jobs_file)
    os.unlink(out_file)
    return results


def ort_brief(r):
    brief = {'status': r['status']}
    if r.get('message'):
        brief['message'] = r['message'][:600]
    for k in ('max_abs', 'max_rel', 'output'):
        if k in r:
            brief[k] = r[k]
    return brief


# ---- one case -----------------------------------------------------------------------------------

def baseline_kind(ort):
    """'pass', 'custom' (ORT can't load a custom domain: the rewrite is what makes it runnable, so
    outputs are judged against PyTorch all the same), or 'fail'."""
    if ort['status'] == 'pass':
        return 'pass'
    if ort['status'] == 'load_error' and 'is not a registered function/op' in ort.get('message', ''):
        return 'custom'
    return 'fail'


def classify(v, baseline_kind_):
    """Sets v['class'] (and v['why'] for WRONG/crash)."""
    ex = v['exit']
    ort = v.get('ort')
    if ex == 1:
        v['class'] = 'refused'
        if ort and ort['status'] != 'pass' and baseline_kind_ == 'pass':
            v['refused_bad_output'] = True
        return
    if ex != 0:
        v['class'] = 'crash'
        v['why'] = (v.get('reasons') or [f'exit {ex}'])[0]
        return
    if not v['output'] or ort is None:
        v['class'] = 'crash'
        v['why'] = 'exit 0 without an output file'
        return
    passed = ort['status'] == 'pass'
    if passed:
        want = v['target']
        got = v.get('opset_after')
        if v['variant'] == 'to-opset' and got is not None and got != want:
            v['class'] = 'WRONG'
            v['why'] = f'exit 0 but the output imports ai.onnx {got}, not {want}'
        elif v['variant'] == 'to-opset' and got is None and want != v['source']:
            v['class'] = 'WRONG'
            v['why'] = f'exit 0 but the import stayed {v["source"]}, not {want}'
        else:
            v['class'] = 'ok'
        return
    if baseline_kind_ == 'fail':
        v['class'] = 'baseline-fail'
        return
    v['class'] = 'WRONG'
    v['why'] = f'ORT {ort["status"]}: {ort.get("message", "")}'[:600]


def convert_case(case, args, targets, case_work):
    """Runs every rewrite of one case; returns the variants (outputs left in case_work)."""
    model = os.path.join(args.cache, case['case'], 'model.onnx')
    source = case['opset']
    extra = case.get('rewrite_args') or []
    specs = [('rewrite', source, [])]
    for t in targets:
        if t == source:
            continue
        specs.append(('to-opset', t, ['--to-opset', str(t)]))
        if t < source and args.opset_flag and case_size(case, args.cache) <= args.opset_flag_max_mb * 1e6:
            specs.append(('opset', t, ['--opset', str(t)]))

    def one(spec):
        variant, t, options = spec
        out_dir = os.path.join(case_work, f'{variant}-{t}')
        res = run_tool(args.bin, model, out_dir, options, extra)
        res.update({'variant': variant, 'target': t, 'source': source})
        return res, out_dir

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        return list(pool.map(one, specs))


def process_chunk(chunk, args, targets, work):
    """Converts the cases of a chunk, runs ORT once over the originals and every distinct output,
    classifies, writes each case's result, removes the outputs."""
    tmp = os.path.join(work, 'tmp')
    jobs, per_case = [], []
    for case, key in chunk:
        case_dir = os.path.join(args.cache, case['case'])
        case_work = os.path.join(tmp, case['case'])
        shutil.rmtree(case_work, ignore_errors=True)
        variants = convert_case(case, args, targets, case_work)
        original_digest = model_digest(os.path.join(case_dir, 'model.onnx'))
        jobs.append({'case': case_dir})
        base_index = len(jobs) - 1
        digests = {original_digest: base_index}
        for v, out_dir in variants:
            out = os.path.join(out_dir, 'model.onnx')
            if not v['output']:
                continue
            d = model_digest(out)
            v['identical_to_input'] = d == original_digest
            if d not in digests:
                jobs.append({'case': case_dir, 'model': out})
                digests[d] = len(jobs) - 1
            v['job'] = digests[d]
        per_case.append((case, key, variants, base_index))
    results = run_ort(jobs, work, 'chunk', args.workers, args.rtol, args.atol)
    # An export that misses PyTorch only by rounding (ConvNeXt's logits of 1e-4, where ORT and
    # PyTorch differ by 3e-6) would leave its conversions unjudged: they are judged again with atol
    # at 10 x the export's own error, when that error is below BASELINE_ATOL_CAP.
    tolerance, rerun = {}, []
    for case, key, variants, base_index in per_case:
        b = results[base_index]
        if b['status'] == 'mismatch' and isinstance(b.get('max_abs'), (int, float)) and b['max_abs'] <= BASELINE_ATOL_CAP:
            atol = max(args.atol, 10 * b['max_abs'])
            tolerance[case['case']] = atol
            for i in sorted({base_index} | {v['job'] for v, _ in variants if 'job' in v}):
                if results[i]['status'] == 'mismatch':
                    rerun.append(i)
    if rerun:
        again = run_ort([dict(jobs[i], atol=tolerance[os.path.basename(jobs[i]['case'])]) for i in rerun], work,
                        'chunk-baseline-atol', args.workers, args.rtol, args.atol)
        for i, r in zip(rerun, again):
            results[i] = r
    for case, key, variants, base_index in per_case:
        baseline = ort_brief(results[base_index])
        kind = baseline_kind(baseline)
        out_variants = []
        # --opset T whose output equals --to-opset T's is the same conversion: noted, not counted twice
        to_opset_jobs = {v['target']: v.get('job') for v, _ in variants if v['variant'] == 'to-opset'}
        for v, _ in variants:
            if 'job' in v:
                v['ort'] = ort_brief(results[v['job']])
            if v['variant'] == 'opset':
                v['same_as_to_opset'] = v.get('job') is not None and v.get('job') == to_opset_jobs.get(v['target'])
            v.pop('job', None)
            classify(v, kind)
            out_variants.append(v)
        result = {'version': RESULT_VERSION, 'key': key, 'case': case['case'], 'model': case['model'],
                  'family': case['family'], 'opset': case['opset'], 'baseline': baseline, 'baseline_kind': kind,
                  'rewrite_args': case.get('rewrite_args') or [], 'variants': out_variants,
                  'atol': tolerance.get(case['case'], args.atol)}
        with open(os.path.join(work, 'results', f'{case["case"]}.json'), 'w') as f:
            json.dump(result, f, indent=1)
        shutil.rmtree(os.path.join(tmp, case['case']), ignore_errors=True)


def case_key(case, args, tool_hash, script_hash, targets):
    h = hashlib.sha256()
    h.update(sha256_file(os.path.join(args.cache, case['case'], 'model.onnx')).digest())
    h.update(str(case.get('data_sha256')).encode())
    tds = os.path.join(args.cache, case['case'], 'test_data_set_0')
    for name in sorted(os.listdir(tds)):
        h.update(name.encode())
        sha256_file(os.path.join(tds, name), h)
    h.update(json.dumps([tool_hash, script_hash, args.rtol, args.atol, targets, args.opset_flag, args.opset_flag_max_mb,
                         case.get('rewrite_args'), RESULT_VERSION, BASELINE_ATOL_CAP]).encode())
    return h.hexdigest()


def case_size(case, cache):
    total = 0
    for name in ('model.onnx', 'model.onnx.data'):
        p = os.path.join(cache, case['case'], name)
        if os.path.exists(p):
            total += os.path.getsize(p)
    return total


# ---- the summary --------------------------------------------------------------------------------

def fmt_counts(c):
    return ' / '.join(str(c.get(k, 0)) for k in ('ok', 'refused', 'WRONG'))


def markdown(manifest, entries, results, targets, args, timing):
    lines = []
    add = lines.append
    counted = [(r, v) for r in results for v in r['variants'] if v['variant'] in ('to-opset', 'rewrite')]
    judged = [(r, v) for r, v in counted if v['variant'] == 'to-opset']
    add('# Real-export conversion matrix')
    add('')
    add('Generated by `tests/exports/conversion_matrix.py` over the corpus `tests/exports/export_corpus.py` '
        f'exports (torch {manifest["torch"]}, torchvision {manifest["torchvision"]}: random weights, fixed seeds, '
        'PyTorch\'s outputs as the oracle; [tests/exports/README.md](../tests/exports/README.md)). Do not edit by hand.')
    add('')
    add(f'For each exported case (model × opset it was exported at) and each target opset {targets[0]}..{targets[-1]} '
        'other than its own: `onnx-rewrite rewrite model.onnx -o out.onnx --to-opset T`, then ONNX Runtime 1.30 (CPU) on '
        f'the output against PyTorch (rtol {args.rtol}, atol {args.atol}, as the conformance corpus). '
        '**ok**: exit 0, imports T, ORT reproduces PyTorch. **refused**: exit 1 with the reasons below. '
        '**WRONG**: exit 0 but ORT refuses the output or gives other numbers (or the import is not T). '
        '**crash**: any other exit. **baseline-fail**: the export itself does not reproduce PyTorch in ORT '
        '(not counted against the converter; listed below).')
    add('')
    # corpus
    exported = [e for e in entries if e['status'] == 'exported']
    models = sorted({e['model'] for e in entries})
    add('## The corpus')
    add('')
    add(f'{len(models)} models, {len(entries)} (model, opset) pairs tried, {len(exported)} exported, '
        f'{len(entries) - len(exported)} not (the exporter refuses them; reasons below).')
    add('')
    fams = sorted({e['family'] for e in entries})
    opsets = sorted({e['opset'] for e in entries})
    add('| family | models | ' + ' | '.join(f'op{o}' for o in opsets) + ' |')
    add('| --- | --- | ' + ' | '.join('---' for _ in opsets) + ' |')
    for fam in fams:
        fe = [e for e in entries if e['family'] == fam]
        cells = []
        for o in opsets:
            oe = [e for e in fe if e['opset'] == o]
            cells.append(f'{sum(e["status"] == "exported" for e in oe)}/{len(oe)}')
        add(f'| {fam} | {len({e["model"] for e in fe})} | ' + ' | '.join(cells) + ' |')
    add('')
    add('Not exported (torch.onnx.export\'s error, first line, shortened):')
    add('')
    why = defaultdict(list)
    for e in entries:
        if e['status'] != 'exported':
            reason = re.sub(r"\s*\[Caused by.*$", '', e.get('reason', ''))
            reason = re.sub(r'opset version \d+', 'opset version N', reason)
            why[reason[:220]].append(e)
    add('| reason | cases | models (opsets) |')
    add('| --- | --- | --- |')
    for reason, es in sorted(why.items(), key=lambda kv: -len(kv[1])):
        by_model = defaultdict(list)
        for e in es:
            by_model[e['model']].append(e['opset'])
        desc = ', '.join(f'{m} ({span(o)})' for m, o in sorted(by_model.items()))
        add(f'| {md(reason)} | {len(es)} | {md(desc)} |')
    add('')
    # baseline
    add('## The exports themselves in ONNX Runtime')
    add('')
    kinds = Counter(r['baseline_kind'] for r in results)
    add(f'{kinds.get("pass", 0)} cases reproduce PyTorch as exported, {kinds.get("custom", 0)} need the rewrite '
        f'(custom domains ORT does not load), {kinds.get("fail", 0)} do not reproduce PyTorch as exported '
        '(their conversions count as baseline-fail unless they pass):')
    add('')
    add('| case | ORT on the export |')
    add('| --- | --- |')
    for r in sorted(results, key=lambda r: r['case']):
        if r['baseline_kind'] == 'fail':
            add(f'| {r["case"]} | {md(r["baseline"]["status"] + ": " + r["baseline"].get("message", "")[:200])} |')
    add('')
    loose = sorted((r['case'], r['atol']) for r in results if r.get('atol', args.atol) != args.atol)
    if loose:
        add(f'{len(loose)} exports miss PyTorch at atol {args.atol} only by rounding (an error under '
            f'{BASELINE_ATOL_CAP}); they and their conversions are judged with atol at 10 times that error: '
            + ', '.join(f'{c} ({a:.1e})' for c, a in loose) + '.')
        add('')
    # per target
    add('## Per target opset (`--to-opset T`)')
    add('')
    add('| target | cases | ok | refused | WRONG | crash | baseline-fail | ok % of judged |')
    add('| --- | --- | --- | --- | --- | --- | --- | --- |')
    for t in targets:
        c = Counter(v['class'] for r, v in judged if v['target'] == t)
        n = sum(c.values())
        j = n - c.get('baseline-fail', 0)
        add(f'| {t} | {n} | {c.get("ok", 0)} | {c.get("refused", 0)} | {c.get("WRONG", 0)} | {c.get("crash", 0)} | '
            f'{c.get("baseline-fail", 0)} | {pct(c.get("ok", 0), j)} |')
    issue = Counter(v['class'] for r, v in judged if 9 <= v['target'] <= 21)
    n = sum(issue.values())
    add(f'| 9..21 (issue #34\'s measure) | {n} | {issue.get("ok", 0)} | {issue.get("refused", 0)} | {issue.get("WRONG", 0)} | '
        f'{issue.get("crash", 0)} | {issue.get("baseline-fail", 0)} | {pct(issue.get("ok", 0), n - issue.get("baseline-fail", 0))} |')
    c = Counter(v['class'] for r, v in judged)
    n = sum(c.values())
    add(f'| all | {n} | {c.get("ok", 0)} | {c.get("refused", 0)} | {c.get("WRONG", 0)} | {c.get("crash", 0)} | '
        f'{c.get("baseline-fail", 0)} | {pct(c.get("ok", 0), n - c.get("baseline-fail", 0))} |')
    add('')
    rw = Counter(v['class'] for r, v in counted if v['variant'] == 'rewrite')
    add(f'The plain rewrite (no opset option, target as for the case): {rw.get("ok", 0)} ok, {rw.get("refused", 0)} '
        f'refused, {rw.get("WRONG", 0)} WRONG, {rw.get("crash", 0)} crash, {rw.get("baseline-fail", 0)} baseline-fail.')
    add('')
    # per family x target
    add('## Per family and target opset: ok / refused / WRONG')
    add('')
    add('| family | ' + ' | '.join(str(t) for t in targets) + ' |')
    add('| --- | ' + ' | '.join('---' for _ in targets) + ' |')
    for fam in sorted({r['family'] for r in results}):
        cells = []
        for t in targets:
            cells.append(fmt_counts(Counter(v['class'] for r, v in judged if r['family'] == fam and v['target'] == t)))
        add(f'| {fam} | ' + ' | '.join(cells) + ' |')
    add('')
    add('## Per source opset (the export) and target opset: ok / refused / WRONG')
    add('')
    add('| from \\ to | ' + ' | '.join(str(t) for t in targets) + ' |')
    add('| --- | ' + ' | '.join('---' for _ in targets) + ' |')
    for s in sorted({r['opset'] for r in results}):
        cells = []
        for t in targets:
            if t == s:
                cells.append('·')
                continue
            cells.append(fmt_counts(Counter(v['class'] for r, v in judged if r['opset'] == s and v['target'] == t)))
        add(f'| {s} | ' + ' | '.join(cells) + ' |')
    add('')
    # opset flag
    of = [(r, v) for r in results for v in r['variants'] if v['variant'] == 'opset']
    if of:
        same = sum(1 for _, v in of if v.get('same_as_to_opset'))
        cls = Counter(v['class'] for _, v in of)
        add(f'`--opset T` below the export\'s opset: {len(of)} runs, {same} wrote the same model as `--to-opset T`; '
            f'{cls.get("ok", 0)} ok, {cls.get("refused", 0)} refused, {cls.get("WRONG", 0)} WRONG, {cls.get("crash", 0)} crash.')
        add('')
    # refusal reasons
    add('## Why conversions were refused')
    add('')
    add('Each distinct reason line the tool printed (count and place removed, the target opset written T), with '
        'the number of (case, target) conversions that printed it; a refusal may print several.')
    add('')
    reasons = defaultdict(list)
    for r, v in judged:
        if v['class'] == 'refused':
            for reason in {normalise_reason(x) for x in v.get('reasons') or ['(no reason printed)']}:
                reasons[reason].append((r, v))
    add('| reason | conversions | source → target opsets | example |')
    add('| --- | --- | --- | --- |')
    for reason, rv in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        pairs = sorted({(r['opset'], v['target']) for r, v in rv})
        ex_r, ex_v = rv[0]
        add(f'| {md(reason[:300])} | {len(rv)} | {md(pairs_desc(pairs))} | {ex_r["case"]} → {ex_v["target"]} |')
    add('')
    left = defaultdict(list)
    for r, v in judged:
        if v['class'] == 'refused':
            for note in v.get('rules_left') or []:
                left[note].append((r, v))
    if left:
        add('Rules that matched a blocking node and left it, with their reason (the tool\'s notes):')
        add('')
        add('| rule: why it left the node | conversions | source → target opsets | example |')
        add('| --- | --- | --- | --- |')
        for note, rv in sorted(left.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            pairs = sorted({(r['opset'], v['target']) for r, v in rv})
            ex_r, ex_v = rv[0]
            add(f'| {md(note[:300])} | {len(rv)} | {md(pairs_desc(pairs))} | {ex_r["case"]} → {ex_v["target"]} |')
        add('')
    bad_out = [(r, v) for r, v in judged if v.get('refused_bad_output')]
    if bad_out:
        add(f'Refused conversions whose written output ORT can\'t run or gets wrong although the export runs: {len(bad_out)}.')
        add('')
        for r, v in bad_out[:40]:
            add(f'- {r["case"]} → {v["target"]}: {md(v["ort"]["status"] + ": " + v["ort"].get("message", "")[:200])}')
        add('')
    # wrong and crash
    for klass in ('WRONG', 'crash'):
        bad = [(r, v) for r in results for v in r['variants'] if v['class'] == klass]
        add(f'## {klass}: {len(bad)}')
        add('')
        if not bad:
            continue
        add('| case | variant | target | what |')
        add('| --- | --- | --- | --- |')
        for r, v in sorted(bad, key=lambda rv: (rv[0]['case'], rv[1]['variant'], rv[1]['target'])):
            add(f'| {r["case"]} | {v["variant"]} | {v["target"]} | {md(v.get("why", "")[:300])} |')
        add('')
    add(f'Run: {timing}.')
    add('')
    return '\n'.join(lines)


def normalise_reason(reason):
    """The target opset out of a reason, so one reason groups over targets (the table says which)."""
    reason = re.sub(r'does not exist at opset \d+', 'does not exist at opset T', reason)
    reason = re.sub(r'accepts nodes that (\w+)-\d+ does not', r'accepts nodes that \1 at T does not', reason)
    reason = re.sub(r"(ai\.onnx opset \d+ can't be (?:lowered|raised) to) \d+", r'\1 T', reason)
    return reason


def md(text):
    # A runtime's message names the files it read: the page names them relative to the corpus
    # (CACHE/case/model.onnx), never as a path of the machine that measured.
    text = re.sub(r'(?:/[^\s/:|]+)+/([^\s/:|]+/[^\s/:|]+\.onnx)', r'CACHE/\1', str(text))
    return text.replace('|', '\\|').replace('\n', ' ')


def pct(a, b):
    return f'{100.0 * a / b:.1f} %' if b else '–'


def span(values):
    values = sorted(set(values))
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f'{start}' if start == v else f'{start}-{v}')
            start = None
    return ','.join(out)


def pairs_desc(pairs):
    by_source = defaultdict(list)
    for s, t in pairs:
        by_source[s].append(t)
    return '; '.join(f'{s}→{span(ts)}' for s, ts in sorted(by_source.items()))


# ---- main ---------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('cache', help='the corpus export_corpus.py wrote (e.g. build/exports)')
    parser.add_argument('--bin', default=os.path.join(ROOT, 'build', 'onnx-rewrite'))
    parser.add_argument('--work', help='results and temporary outputs (default: CACHE-matrix)')
    parser.add_argument('--targets', type=parse_targets, default=list(range(7, 22)), help='target opsets (default 7-21)')
    parser.add_argument('--match', help='only cases whose name (model-opN) matches this regular expression')
    parser.add_argument('--jobs', type=int, default=2, help='rewrites at once (default 2)')
    parser.add_argument('--workers', type=int, default=2, help='ORT worker processes (default 2)')
    parser.add_argument('--rtol', type=float, default=1e-3)
    parser.add_argument('--atol', type=float, default=1e-7)
    parser.add_argument('--no-opset-flag', dest='opset_flag', action='store_false',
                        help='do not also run --opset T for T below the export\'s opset')
    parser.add_argument('--opset-flag-max-mb', type=float, default=100,
                        help='run --opset T only on cases up to this size (default 100 MB: the big ones would copy '
                             'their weights once more per target for a conversion docs/cli.md defines as the same)')
    parser.add_argument('--markdown', help='write the summary here (docs/real-export-matrix.md)')
    parser.add_argument('--json', help='write every result here')
    parser.add_argument('--chunk-mb', type=float, default=3000,
                        help='cases converted before ORT runs and their outputs are removed, by size (default 3000 MB)')
    args = parser.parse_args()

    args.cache = os.path.abspath(args.cache)
    args.bin = os.path.abspath(args.bin)
    work = os.path.abspath(args.work or args.cache.rstrip('/') + '-matrix')
    for what, path in (('onnx-rewrite', args.bin), ('tests/ort/conformance.js', CONFORMANCE_JS)):
        if not os.path.exists(path):
            raise HarnessError(f'{what} not found at {path}' + (' (build it: cmake --build build)' if what == 'onnx-rewrite' else ''))
    if not shutil.which('node'):
        raise HarnessError('node not found on PATH (ONNX Runtime runs under Node: see tests/ort/README.md)')
    if not os.path.isdir(os.path.join(ROOT, 'node_modules', 'onnxruntime-node')):
        raise HarnessError('onnxruntime-node is not installed: ONNXRUNTIME_NODE_INSTALL=skip npm ci (tests/ort/README.md)')

    manifest, entries, cases = load_cases(args.cache, args.match)
    if not cases:
        raise HarnessError('no exported case selected')
    if not manifest.get('complete', True):
        print(f'conversion_matrix: note: {args.cache}/manifest.json is incomplete (an export is under way): '
              f'the {len(cases)} cases exported so far', file=sys.stderr)
    os.makedirs(os.path.join(work, 'results'), exist_ok=True)
    tool_hash = sha256_file(args.bin).hexdigest()
    # what a case's result depends on in this script: the functions that make it (not the page)
    script_hash = hashlib.sha256(''.join(inspect.getsource(f) for f in (
        reasons_of, run_tool, run_ort, ort_brief, baseline_kind, classify, convert_case, process_chunk,
        model_digest)).encode()).hexdigest()

    t0 = time.time()
    todo, results = [], {}
    for case in cases:
        key = case_key(case, args, tool_hash, script_hash, args.targets)
        path = os.path.join(work, 'results', f'{case["case"]}.json')
        if os.path.exists(path):
            with open(path) as f:
                cached = json.load(f)
            if cached.get('key') == key:
                results[case['case']] = cached
                continue
        todo.append((case, key))
    print(f'conversion_matrix: {len(cases)} cases, {len(results)} cached, {len(todo)} to run', file=sys.stderr, flush=True)

    chunk, chunk_bytes, done = [], 0, 0
    limit = args.chunk_mb * 1e6
    for i, (case, key) in enumerate(todo):
        size = case_size(case, args.cache) * (len(args.targets) + 1)
        if chunk and (chunk_bytes + size > limit or len(chunk) >= 12):
            process_chunk(chunk, args, args.targets, work)
            done += len(chunk)
            print(f'  [{done}/{len(todo)}] {time.time() - t0:.0f} s', file=sys.stderr, flush=True)
            chunk, chunk_bytes = [], 0
        chunk.append((case, key))
        chunk_bytes += size
    if chunk:
        process_chunk(chunk, args, args.targets, work)
    for case, _ in todo:
        with open(os.path.join(work, 'results', f'{case["case"]}.json')) as f:
            results[case['case']] = json.load(f)
    shutil.rmtree(os.path.join(work, 'tmp'), ignore_errors=True)

    ordered = [results[c['case']] for c in cases]
    elapsed = time.time() - t0
    counts = Counter(v['class'] for r in ordered for v in r['variants'] if v['variant'] == 'to-opset')
    print('conversion_matrix: --to-opset: ' + ', '.join(f'{counts.get(k, 0)} {k}' for k in CLASSES) +
          f' ({elapsed:.0f} s)', file=sys.stderr)
    for r in ordered:
        for v in r['variants']:
            if v['class'] in ('WRONG', 'crash'):
                print(f'  {v["class"]} {r["case"]} {v["variant"]} {v["target"]}: {v.get("why", "")[:300]}', file=sys.stderr)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(ordered, f, indent=1)
    if args.markdown:
        timing = (f'{len(cases)} cases, {len(todo)} converted in this run, {elapsed / 60:.0f} min on '
                  f'{os.cpu_count()} cores' if todo else f'{len(cases)} cases, all from the cache')
        with open(args.markdown, 'w') as f:
            f.write(markdown(manifest, entries, ordered, args.targets, args, timing))
    bad = sum(1 for r in ordered for v in r['variants'] if v['class'] in ('WRONG', 'crash'))
    return 1 if bad else 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except HarnessError as err:
        print(f'conversion_matrix: error: {err}', file=sys.stderr)
        sys.exit(2)
