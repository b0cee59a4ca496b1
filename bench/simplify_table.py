#!/usr/bin/env python3
"""Nodes left by `--simplify` (exact, and with --fuse) and `--target ort` next to ONNX Runtime's basic and extended levels.

For each model given (a .onnx file, or a directory searched for model.onnx files: the real
models of scripts/fetch-test-data.sh, a corpus of tests/exports/export_corpus.py), writes:
the original's main-graph nodes; what ONNX Runtime's optimizer saves at level basic (standard
ops only) and extended; `onnx-rewrite rewrite --simplify` (--target onnx), `--simplify --fuse`
(adding the folds that are not bit for bit: BatchNormalization into Conv, MatMul + Add into
Gemm, as ORT's basic level does) and `--target ort`;
and whether each of ours computes what the original does (`onnx-rewrite verify`). A Markdown
table on stdout (or --markdown FILE); exit 1 when any of ours fails its verification.

    /usr/bin/python3 bench/simplify_table.py build/test-data/models build/exports-slice
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main_graph_nodes(path):
    import onnx  # Debian's python3-onnx
    return len(onnx.load(str(path), load_external_data=False).graph.node)


def models_in(paths):
    for path in map(Path, paths):
        if path.is_file():
            yield path.parent.name if path.name == "model.onnx" else path.stem, path
        else:  # corpus directories may be symbolic links
            found = [Path(top) / "model.onnx" for top, _, files in os.walk(path, followlinks=True) if "model.onnx" in files]
            for model in sorted(found):
                yield str(model.parent.relative_to(path)), model


def ort_optimized(model, level, out):
    run = subprocess.run(["node", str(ROOT / "tests/ort/optimize.js"), str(model), str(out), "--level", level],
                         capture_output=True, text=True)
    return main_graph_nodes(out) if run.returncode == 0 and out.exists() else None


def ours(tool, model, out, options):
    run = subprocess.run([tool, "rewrite", str(model), "-o", str(out), "--no-provenance", *options], capture_output=True, text=True)
    if run.returncode not in (0, 1) or not out.exists():  # 1: a target not met (a custom op): still written
        return None, "failed: " + (run.stderr.strip().splitlines() or ["?"])[-1]
    verify = subprocess.run([tool, "verify", str(model), str(out)], capture_output=True, text=True)
    verdict = {0: "match", 4: "MISMATCH"}.get(verify.returncode, "error")
    if verify.returncode == 0 and "not compared" in verify.stdout.lower():
        verdict = "not compared"
    return main_graph_nodes(out), verdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--tool", default=str(ROOT / "build/onnx-rewrite"))
    parser.add_argument("--markdown")
    args = parser.parse_args()
    try:
        import onnx  # noqa: F401
    except ImportError:
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        sys.exit("simplify_table.py: needs python3-onnx (apt-get install python3-onnx)")
    rows = ["| model | original | ORT basic | `--simplify` | verified | `--simplify --fuse` | verified | ORT extended | `--target ort` | verified |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    failed = False
    totals = [0] * 6
    with tempfile.TemporaryDirectory(prefix="simplify-table-") as work:
        for index, (name, model) in enumerate(models_in(args.paths)):
            out = Path(work) / str(index)
            out.mkdir()
            figures = [main_graph_nodes(model), ort_optimized(model, "basic", out / "basic.onnx"),
                       ort_optimized(model, "extended", out / "extended.onnx")]
            simplified, simplified_verdict = ours(args.tool, model, out / "simplify.onnx", ["--simplify"])
            fused, fused_verdict = ours(args.tool, model, out / "fuse.onnx", ["--simplify", "--fuse"])
            for_ort, ort_verdict = ours(args.tool, model, out / "ort.onnx", ["--target", "ort"])
            failed |= "MISMATCH" in (simplified_verdict, fused_verdict, ort_verdict) or None in (simplified, fused, for_ort)
            cells = [figures[0], figures[1], simplified, simplified_verdict, fused, fused_verdict, figures[2], for_ort, ort_verdict]
            rows.append("| " + " | ".join([name] + ["–" if c is None else str(c) for c in cells]) + " |")
            if None not in figures and None not in (simplified, fused, for_ort):
                for i, value in enumerate([figures[0], figures[1], simplified, fused, figures[2], for_ort]):
                    totals[i] += value
            print(rows[-1], file=sys.stderr, flush=True)
    rows.append(f"| **total** | {totals[0]} | {totals[1]} | {totals[2]} | | {totals[3]} | | {totals[4]} | {totals[5]} | |")
    text = "\n".join(rows) + "\n"
    if args.markdown:
        Path(args.markdown).write_text(text)
    else:
        sys.stdout.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
