#!/usr/bin/env python3
"""Renders the measured tables of the documents from the committed data.

A document holds blocks

    <!-- figures:NAME -->
    (generated)
    <!-- /figures -->

and BLOCKS below says what each NAME is rendered from. Prose around a block
names runs and says what they mean; the figures are the block's.

    scripts/figures.py --check    # fail naming every block that differs from its data (scripts/test.sh)
    scripts/figures.py --write    # rewrite every block from its data
"""

import csv
import statistics
import difflib
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOCS = ["README.md", "docs/results.md", "kernels/GPU.md", "tuner/GUIDE.md"]
BLOCK = re.compile(r"(<!-- figures:([\w-]+) -->\n)(.*?)(<!-- /figures -->)", re.DOTALL)
KIB, MIB = 1024, 1024 * 1024
NCCLS = ("nccl", "nccl_symmetric")


def read(relative):
    with open(os.path.join(ROOT, relative), encoding="utf-8") as f:
        return f.read()


def size(nbytes):
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def table(header, rows):
    lines = [header, ["---"] * len(header)] + rows
    return "\n".join("| " + " | ".join(str(c) for c in line) + " |" for line in lines)


def bench(path):
    """A `tuner bench` CSV: {(collective, dtype, mode, bytes): {algo: median µs, or None if declined}}."""
    rows = {}
    for r in csv.DictReader(read(path).splitlines()):
        key = (r["collective"], r["dtype"], r["mode"], int(r["bytes"]))
        rows.setdefault(key, {})[r["algo"]] = float(r["median_us"]) if r["status"] == "ok" else None
    return rows


def best(algos):
    """(algo, median) of the fastest custom algorithm, or (None, None)."""
    return min(((m, a) for a, m in algos.items() if a not in NCCLS and m is not None), default=(None, None))[::-1]


def mean(values):
    return sum(values) / len(values)


# ---------------------------------------------------------------------------
# Renderers: each returns Markdown; `link(path)` links a data file from the document.


def bench_table(path, collective, sizes, link, algos=None, dtype="bf16", mode="graph"):
    data = bench(path)
    shown = algos or list(dict.fromkeys(a for k, v in data.items() if k[0] == collective for a in v if a not in NCCLS))
    rows = []
    for nbytes in sizes:
        cells = data[(collective, dtype, mode, nbytes)]
        fastest = min((cells[a], a) for a in shown if cells.get(a) is not None)
        times = [("declined" if cells.get(a) is None else f"{cells[a]:.2f}") for a in shown]
        times = [f"**{t}**" if a == fastest[1] and len(shown) > 1 else t for a, t in zip(shown, times)]
        rows.append([size(nbytes), f"{cells['nccl']:.2f}", *times, f"{fastest[0] / cells['nccl']:.2f}"])
    ratio = f"{shown[0]} / NCCL" if len(shown) == 1 else "best / NCCL"
    caption = f"{dtype} {collective.replace('_', '-')}, {mode}, median µs per call. Data: {link(path)}."
    return table(["output size", "NCCL", *shown, ratio], rows) + "\n\n" + caption


def history(steps, collective, sizes, link):
    """One row per run: the fastest custom algorithm's median (and its ratio to NCCL) at each size."""
    rows = []
    for label, path in steps:
        data = bench(path)
        cells = []
        for nbytes in sizes:
            algos = data[(collective, "bf16", "graph", nbytes)]
            cells.append(f"{best(algos)[1]:.2f} ({best(algos)[1] / algos['nccl']:.2f})")
        rows.append([label, link(path), *cells])
    return table(["step", "data", *map(size, sizes)], rows)


def ab(variants, series, sizes, link):
    """Rows: each (collective, mode, algo) at each size; columns: each variant's
    median µs (the mean of its runs; algo "best": its fastest custom algorithm), with
    its change against the first variant."""
    runs = [(label, [bench(p) for p in paths]) for label, paths in variants]
    rows = []
    for collective, mode, algo in series:
        for nbytes in sizes:
            key = (collective, "bf16", mode, nbytes)
            per = []
            for _, rs in runs:
                times = {a: mean([r[key][a] for r in rs]) for a in rs[0][key] if all(r[key][a] is not None for r in rs)}
                per.append(best(times)[1] if algo == "best" else times.get(algo))
            if None in per:  # declined in a variant: nothing to compare
                continue
            cells = [f"{per[0]:.2f}"] + [f"{v:.2f} ({(v / per[0] - 1) * 100:+.1f}%)" for v in per[1:]]
            rows.append([f"{collective.replace('_', '-')} {algo}", mode, size(nbytes), *cells])
    folders = sorted({os.path.dirname(p) for _, paths in variants for p in paths})
    caption = f"bf16, median µs per call. Data: {', '.join(link(f) for f in folders)}."
    return table(["call", "mode", "size", *(label for label, _ in variants)], rows) + "\n\n" + caption


VERIFY = re.compile(r"^(\S+ ws\d+ \S+ \S+): (\d+) held-out sizes, regret median ([\d.]+%).*worst ([\d.]+%) .*— (\w+)$")
WORST_AT = re.compile(r"^  at (\S+): chose (\S+) .*, best (\S+) ")


def verify(path, link):
    """A `tuner verify` log: one row per key, with where its worst regret was."""
    rows, lines = [], read(path).splitlines()
    for i, line in enumerate(lines):
        if m := VERIFY.match(line):
            at = WORST_AT.match(lines[i + 1]) if i + 1 < len(lines) else None
            where = f"{at[1]}: {at[2]}, not {at[3]}" if at else "–"
            rows.append([m[1], m[2], m[3], m[4], where, m[5]])
    verdict = [line for line in lines if re.match(r"^(PASS|FAIL|INCONCLUSIVE) ", line)]
    if not rows or len(verdict) != 1:
        raise ValueError(f"{path}: {len(rows)} key lines and {len(verdict)} verdict lines")
    header = ["key", "held-out sizes", "median regret", "worst regret", "worst at: chosen, not the fastest", "verdict"]
    return table(header, rows) + f"\n\n`{verdict[0]}`. Log: {link(path)}."


def excerpt(paths, patterns, link):
    """The lines of logs that match any of `patterns`, verbatim (after the log's name, for several)."""
    paths = [paths] if isinstance(paths, str) else paths
    names = [os.path.basename(path) for path in paths]
    if len(set(names)) < len(names):  # the same file name in several folders: name the folders too
        names = [os.path.relpath(path, os.path.commonpath(paths)) for path in paths]
    lines = [
        (f"{name}: " if len(paths) > 1 else "") + line
        for path, name in zip(paths, names)
        for line in read(path).splitlines()
        if any(re.search(p, line) for p in patterns)
    ]
    if not lines:
        raise ValueError(f"no line of {paths} matches {patterns}")
    return "```text\n" + "\n".join(lines) + f"\n```\n\nFrom {', '.join(map(link, paths))}."


def startup(path, link):
    """`startup` lines: one row per world built, ranks with the same figures merged."""
    rows = []
    for line in read(path).splitlines():
        if line.startswith("STARTUP "):
            kind, *fields = line.split()[1:]
            f = dict(x.split("=") for x in fields)
            row = [kind, f["world"], f["rank"], f["build"], f["kernels"], f["world_ms"], f["obtain_ms"], f["load_ms"], f["rest_ms"]]
            if rows and rows[-1][:2] + rows[-1][3:] == row[:2] + row[3:]:
                rows[-1][2] += f", {row[2]}"
            else:
                rows.append(row)
    header = ["world", "ranks", "rank", "build", "kernels", "world_ms", "obtain_ms", "load_ms", "rest_ms"]
    return table(header, rows) + f"\n\nData: {link(path)}."


def headline(link):
    algos = bench(X2)[("all_reduce", "bf16", "graph", 4 * KIB)]
    algo, ours = best(algos)
    return (
        f"**{ours / algos['nccl']:.2f}× NCCL's time**: on 2 × H200 over NVLink, a 4 KiB bf16 all-reduce replayed in a CUDA graph "
        f"takes {ours:.2f} µs with colltune's `{algo}` and {algos['nccl']:.2f} µs with NCCL 2.28.3, timed in the same "
        f"process (nvidia-h200-x2, 2026-12-01; data: {link(X2)}; every size in {link('docs/results.md')})."
    )


# ---------------------------------------------------------------------------
# The blocks.

X2 = "kernels/bench/h200-x2.csv"
X4 = "kernels/bench/h200-x4.csv"
RUNS = "kernels/bench/runs/"
DAY1 = RUNS + "2026-12-01-h200-1gpu/"
DAY2 = RUNS + "2026-12-02-h200-1gpu/"
OCTAVES4 = [4 * KIB, 64 * KIB, 256 * KIB, MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB]
QUARTERS = [4 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
LARGE = [MIB, 2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB]
SOAK = [r"^\s*soak: replays="]


def ab_runs(folder, labels):
    """The variants of a `scripts/gpu-ab.sh` folder, whose run N (`ab-N.csv`) is of variant labels[N]."""
    out = {}
    for n, label in enumerate(labels):
        out.setdefault(label, []).append(f"{folder}ab-{n}.csv")
    return list(out.items())


def span(values, unit="%"):
    """`1.2–1.3%` (one figure when all are equal once rounded)."""
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def budget_regret(folder, link):
    """`tuner fit --memory-budget`'s reports (fit-ws{W}-{budget}.txt): per
    world and budget, the regret of the refitted and of the run-time capped
    table, mean and worst over the keys, per collective."""
    rows = []
    for world in (2, 4):
        for budget, name in (("256MiB", "256 MiB (default)"), ("64MiB", "64 MiB")):
            lines = [l for l in read(f"{folder}fit-ws{world}-{budget}.txt").splitlines() if "regret mean" in l]
            row = [world, name]
            for collective in ("all_reduce", "all_gather"):
                mine = [l for l in lines if l.strip().startswith(collective)]
                for fitted in ("regret", "run time:"):
                    found = [re.search(fitted + r" mean ([\d.]+)%, worst ([\d.]+)%", l) for l in mine]
                    means, worsts = ([float(m[i]) for m in found] for i in (1, 2))
                    row.append(f"mean {span(means)}, worst {span(worsts)}")
            rows.append(row)
    header = ["world", "budget", "all-reduce, refitted", "all-reduce, capped at run time",
              "all-gather, refitted", "all-gather, capped at run time"]
    return table(header, rows) + f"\n\nFrom {link(folder)}."


def fastest_unfused(algos):
    """(algo, median) of the fastest unfused path of a fused bench's size: `unfused` as the
    tables pick it or `unfused+<algo>` with that all-reduce forced."""
    return min(((a, t) for a, t in algos.items() if a.startswith("unfused") and t is not None), key=lambda kv: kv[1])


def fused_table(path, mode, link):
    """`tuner bench --collective all_reduce_add_rmsnorm`'s CSV: per size, the
    unfused path as the tables pick it and at its fastest (each all-reduce
    forced), each fused kernel, and the faster fused kernel over that."""
    rows = []
    for (collective, dtype, m, nbytes), algos in sorted(bench(path).items(), key=lambda kv: kv[0][3]):
        if collective != "all_reduce_add_rmsnorm" or m != mode:
            continue
        via, fastest = fastest_unfused(algos)
        fused = min(algos["one_shot_push"], algos["two_shot_push"])
        rows.append([size(nbytes), f"{algos['unfused']:.2f}", f"{fastest:.2f} (`{via}`)",
                     f"{algos['one_shot_push']:.2f}", f"{algos['two_shot_push']:.2f}", f"{fused / fastest:.2f}"])
    header = ["per-rank input", "unfused (tables)", "fastest unfused", "one_shot_push", "two_shot_push", "fused / fastest unfused"]
    return table(header, rows) + f"\n\n{dtype}, {mode}, hidden 4096 (8 KiB a token), median µs per call. Data: {link(path)}."


def norm_table(path, link):
    """candle-tp norm-bench's CSV: per dtype and tokens (graph), colltune's
    add + RMSNorm against candle's, with their bandwidth."""
    data = {}
    for r in csv.DictReader(read(path).splitlines()):
        if r["mode"] == "graph":
            data.setdefault((r["dtype"], int(r["tokens"])), {})[r["impl"]] = r
    rows = []
    for (dtype, tokens), impls in data.items():
        c, k = impls["colltune"], impls["candle"]
        rows.append([dtype, tokens, f"{float(c['median_us']):.2f}", f"{float(k['median_us']):.2f}", c["ratio"],
                     f"{float(c['gbps']):.0f} ({c['pct_of_copy']}%)"])
    copy = next(iter(next(iter(data.values())).values()))["copy_gbps"]
    header = ["dtype", "tokens", "colltune µs", "candle µs", "colltune / candle", "colltune GB/s (% of copy)"]
    return table(header, rows) + (f"\n\nHidden 4096, graph mode, median per call; % of the GPU's copy bandwidth "
                                  f"measured in the same process ({float(copy):.0f} GB/s). Data: {link(path)}.")


def tpot_table(path, link):
    """candle-tp's CSV: TPOT (graph and eager) of every back-end per model."""
    rows = []
    for r in csv.DictReader(read(path).splitlines()):
        rows.append([r["model"], r["mode"], r["backend"], f"{float(r['tpot_median_ms']):.3f}",
                     f"{float(r['tpot_p10_ms']):.3f}–{float(r['tpot_p90_ms']):.3f}", r["tokens_agree_reference"] or "–"])
    header = ["model", "mode", "back-end", "TPOT ms (median)", "p10–p90", "tokens = one-rank model"]
    return table(header, rows) + f"\n\nWorld of one, batch 1, 256 decode steps. Data: {link(path)}."


DAY3 = RUNS + "2026-12-03-h200-1gpu/"
DAY4 = RUNS + "2026-12-04-h200-1gpu/"
SWEEP4 = "tuner/runs/2026-12-04-loopback-sweep/"
FUSED_SERIES = [("all_reduce_add_rmsnorm", "graph", a) for a in ("one_shot_push", "two_shot_push")]
FUSED_SIZES = [8 * KIB * 2**k for k in range(7)]

def fused_day(day, fused_csv, candle):
    """A day's four blocks of the fused collective: its bench in both modes
    (`fused_csv`), and candle-tp's norm-bench and TPOT (folder `candle`)."""
    return {
        f"{day}-fused-graph": lambda link: fused_table(fused_csv, "graph", link),
        f"{day}-fused-eager": lambda link: fused_table(fused_csv, "eager", link),
        f"{day}-norm": lambda link: norm_table(candle + "norm-bench-w1.csv", link),
        f"{day}-tpot": lambda link: tpot_table(candle + "candle-tp.csv", link),
    }


DAY4B = RUNS + "2026-12-04b-h200-1gpu/"


def norm_variants(folder, labels, link):
    """candle-tp norm-bench CSVs of one folder (`w1-N.csv`, variant labels[N]):
    per variant, the span of colltune / candle over 1 to 64 tokens (graph), per dtype."""
    rows = []
    for n, label in enumerate(labels):
        ratios = {}
        for r in csv.DictReader(read(f"{folder}w1-{n}.csv").splitlines()):
            if r["mode"] == "graph" and r["impl"] == "colltune":
                ratios.setdefault(r["dtype"], []).append(float(r["ratio"]))
        rows.append([label] + [f"{min(v):.2f}–{max(v):.2f}" for v in ratios.values()])
    header = ["add + RMSNorm kernel", *(f"{d}: colltune / candle" for d in ratios)]
    return table(header, rows) + f"\n\nHidden 4096, 1 to 64 tokens, graph mode, medians. Data: {link(folder)}."


DAY4C = RUNS + "2026-12-04c-h200-1gpu/"


def fused_pairs(folder, labels, pairs, link, dtype="bf16", mode="graph"):
    """A `scripts/gpu-ab.sh` folder of the fused bench (run N of variant
    labels[N]): per size, for each (name, fused variant, unfused variant) of
    `pairs`, the fused one-shot's median in the first variant's runs, the
    fastest unfused path's in the second's (each the mean over that variant's
    runs), and their ratio."""
    runs = dict((label, [bench(p) for p in paths]) for label, paths in ab_runs(folder, labels))

    def at(variant, key, pick):
        return mean([pick(r[key]) for r in runs[variant]])

    sizes = sorted({k[3] for r in runs[labels[0]] for k in r if k[1] == dtype and k[2] == mode})
    rows = []
    for nbytes in sizes:
        key = ("all_reduce_add_rmsnorm", dtype, mode, nbytes)
        cells = []
        for _, fused, unfused in pairs:
            f = at(fused, key, lambda algos: algos["one_shot_push"])
            u = at(unfused, key, lambda algos: fastest_unfused(algos)[1])
            cells.append(f"{f:.2f} / {u:.2f} = {f / u:.3f}")
        rows.append([size(nbytes), *cells])
    header = ["per-rank input", *(f"{name}: fused / unfused" for name, _, _ in pairs)]
    return table(header, rows) + (f"\n\n{dtype}, {mode}, hidden 4096 (8 KiB a token), median µs per call: the fused "
                                  f"`one_shot_push`, the fastest unfused path (each all-reduce forced, then the add + "
                                  f"RMSNorm kernel). Data: {link(folder)}.")


DAY4D = RUNS + "2026-12-04d-h200-1gpu/"
TRACE_POINTS = {1: "after griddepcontrol.wait", 2: "call state read", 3: "pushes issued", 4: "re-arm issued",
                6: "own packs received", 7: "rows' barrier passed", 8: "output stored", 9: "end"}


def trace_table(variants, kind, nbytes, link):
    """The `TR` lines (kernels' CT_EXP_TRACE stamps, thread 0 of block 0) of
    `tuner bench` logs: per variant, the median SM cycles from each stamp to the
    next of kernel `kind` (k1 the all-reduce one-shot, k2 the fused one-shot,
    k3 the add + RMSNorm kernel) at `nbytes` per rank."""
    rows, header = [], None
    for label, path in variants:
        segments = {}
        for line in read(path).splitlines():
            t = line.split()
            if not line.startswith("TR ") or t[1] != kind or int(t[4][1:]) != nbytes:
                continue
            stamps = [(k + 1, int(c)) for k, c in enumerate(t[t.index("C") + 1:t.index("G")])]
            present = [(k, c) for k, c in stamps if c >= 0]
            for (k0, c0), (k1, c1) in zip(present, present[1:]):
                segments.setdefault((k0, k1), []).append(c1 - c0)
            segments.setdefault((1, 9), []).append(dict(stamps)[9] - dict(stamps)[1])
        if not segments:
            raise ValueError(f"{path}: no {kind} trace at {nbytes} bytes")
        keys = sorted(segments, key=lambda k: (k == (1, 9), k))  # the total last
        header = header or keys
        if keys != header:
            raise ValueError(f"{path}: stamps {keys}, not {header}")
        rows.append([label, len(segments[(1, 9)]), *(int(statistics.median(segments[k])) for k in keys)])
    names = [f"{TRACE_POINTS[b]}" if a != 1 or b != 9 else "total (T1 → end)" for a, b in header]
    return table(["variant", "calls", *names], rows) + (
        f"\n\nMedian SM cycles (about 1.96 a ns) from the stamp before to the one named, thread 0 of "
        f"block 0 of each rank, one call in 128 printed. Data: {', '.join(link(p) for _, p in variants)}.")


BLOCKS = {
    "headline": headline,
    "x2-all-reduce": lambda link: bench_table(X2, "all_reduce", OCTAVES4, link),
    "x2-all-gather": lambda link: bench_table(X2, "all_gather", OCTAVES4[:-2], link),
    "x2-all-reduce-eager": lambda link: bench_table(X2, "all_reduce", [4 * KIB, MIB, 16 * MIB], link, mode="eager"),
    "x2-steps": lambda link: history(
        [
            ("per-W builds, UNROLL × W packs in flight, one block per SM, store-based two-shot, own slot skipped", RUNS + "h200-x2-step1.csv"),
            ("push re-arms the previous buffer before polling", RUNS + "h200-x2-before-pdl.csv"),
            ("programmatic dependent launch", RUNS + "h200-x2-pdl.csv"),
            ("`two_shot_push` (barrier-free two-shot)", RUNS + "h200-x2-512-threads.csv"),
            ("world size 2: blocks of 1024 threads, one pack per thread per step", RUNS + "h200-x2-1024-threads.csv"),
            ("world size 2: warps dealt to blocks from 8 KiB to 8 MiB per rank", X2),
        ],
        "all_reduce",
        [4 * KIB, 64 * KIB, MIB, 8 * MIB, 16 * MIB, 64 * MIB],
        link,
    ),
    "x2-pdl": lambda link: ab(
        [("off", [RUNS + "ab-2026-11-30/nopdl.csv"]), ("on", [RUNS + "ab-2026-11-30/pdl.csv"])],
        [("all_reduce", "graph", "best"), ("all_reduce", "eager", "best")],
        [4 * KIB, 256 * KIB, 2 * MIB, 8 * MIB, 32 * MIB],
        link,
    ),
    "x2-launch-shape": lambda link: ab(
        [("512 × 4 packs", [RUNS + "ab-2026-12-01/r2-t512-ab-0.csv"])]
        + [(f"512 × {n}", [RUNS + f"ab-2026-12-01/r2-t512-ab-{i}.csv"]) for i, n in ((1, 2), (2, 1))]
        + [(f"1024 × {n}", [RUNS + f"ab-2026-12-01/r3-ab-{i}.csv"]) for i, n in ((4, 2), (5, 1))],
        [("all_reduce", "graph", "best")],
        LARGE,
        link,
    ),
    "x2-deal": lambda link: ab(
        [
            ("numbered block by block", [RUNS + "ab-2026-12-01/r4-base.csv", RUNS + "ab-2026-12-01/r4-base2.csv"]),
            ("dealt", [RUNS + "ab-2026-12-01/r4-deal.csv", RUNS + "ab-2026-12-01/r4-deal2.csv"]),
        ],
        [(c, "graph", a) for c in ("all_reduce", "all_gather") for a in ("best", "one_shot_pull")],
        [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB],
        link,
    ),
    "x2-ncu": lambda link: excerpt([RUNS + f"ab-2026-12-01/r1-ncu-base-{i}.txt" for i in (0, 1)], [r"__"], link),
    "x2-verify": lambda link: verify("tuner/runs/2026-12-01-h200-x2/verify-ws2-final.log", link),
    "x2-verify-published": lambda link: verify("tuner/runs/2026-11-30-h200-x2/verify-published.log", link),
    "x2-sweep": lambda link: excerpt("tuner/runs/2026-12-01-h200-x2/sweep-ws2-final.log", [r"^wrote "], link),
    "x2-soak": lambda link: excerpt(RUNS + "gpu_processes-h200-x2-dealt.log", SOAK + [r"^test ", r"left \("], link),
    "x2-suites": lambda link: excerpt(
        [RUNS + f"{t}-h200-x2-dealt.log" for t in ("kernels_unit", "nvrtc_compile", "gpu_loopback", "gpu_devices", "gpu_processes")],
        [r"^test result:"],
        link,
    ),
    "x4-all-reduce": lambda link: bench_table(X4, "all_reduce", QUARTERS, link),
    "x4-all-gather": lambda link: bench_table(X4, "all_gather", QUARTERS[:-1], link),
    "x4-verify": lambda link: verify("tuner/runs/2026-11-30-h200-x4-2/verify4.log", link),
    "x4-verify-published": lambda link: verify("tuner/runs/2026-11-30-h200-x4-2/verify4-pub.log", link),
    "x4-sweep": lambda link: excerpt("tuner/runs/2026-11-30-h200-x4-2/sweep4.log", [r"^wrote "], link),
    "x4-soak": lambda link: excerpt(RUNS + "soak-h200-x4.log", SOAK, link),
    "x4-suites": lambda link: excerpt([RUNS + f"{t}-h200-x4.log" for t in ("gpu_devices", "gpu_processes")], [r"^test result:"], link),
    "day1-recipe": lambda link: excerpt(DAY1 + "run.log", [r": exit \d+ in "], link),
    "day1-steps": lambda link: ab(
        ab_runs(DAY1 + "ab-steps-fix/", ["before the rewrite", "rewrite", "fix"] * 2),
        [("all_reduce", "graph", a) for a in ("one_shot_push", "one_shot_pull", "two_shot_pull", "two_shot_push")],
        [4 * KIB, 16 * MIB],
        link,
    ),
    "day1-nccl-symmetric": lambda link: bench_table(
        DAY1 + "nccl-symmetric/bench-w1.csv", "all_reduce", [KIB, MIB, 16 * MIB, 64 * MIB], link, algos=["nccl_symmetric"]
    ),
    "day2-checks": lambda link: ab(
        ab_runs(
            DAY2 + "ab-attribution/",
            ["a84ce51", "warp vote", "a84ce51's CUDA", "no vote", "plain entry", "all three off", "warp vote", "a84ce51"],
        ),
        [("all_reduce", "graph", a) for a in ("one_shot_push", "one_shot_pull", "two_shot_pull", "two_shot_push", "nccl")],
        [4 * KIB],
        link,
    ),
    "startup": lambda link: startup(DAY2 + "startup/startup.txt", link),
    "day3-candidates": lambda link: ab(
        ab_runs(
            DAY3 + "ab-call-cost/",
            ["a84ce51", "before", "all three", "barrier verdict", "verdict + own packs", "verdict + idle exit"] * 2,
        ),
        [(c, "graph", a) for c, algos in (("all_reduce", ("one_shot_push", "two_shot_push", "one_shot_pull", "two_shot_pull")),
                                          ("all_gather", ("one_shot_push", "one_shot_pull"))) for a in algos],
        [4 * KIB],
        link,
    ),
    "day3-call-cost": lambda link: ab(
        ab_runs(DAY3 + "ab-final/", ["a84ce51", "this build"] * 2),
        [(c, "graph", a) for c, algos in (("all_reduce", ("one_shot_push", "two_shot_push", "one_shot_pull", "two_shot_pull", "nccl")),
                                          ("all_gather", ("one_shot_push", "one_shot_pull", "nccl"))) for a in algos],
        [4 * KIB],
        link,
    ),
    **fused_day("day3", DAY3 + "fused-final/bench-fused.csv", DAY3 + "candle-final/"),
    "day3-sweep-time": lambda link: excerpt(
        ["tuner/runs/2026-12-03-loopback-sweep/a84ce51-sweep.log", "tuner/runs/2026-12-03-loopback-sweep/main-sweep.log"],
        [r"^wrote "],
        link,
    ),
    "day3-sweep-fused": lambda link: excerpt(DAY3 + "tuner/tuner-sweep.log", [r"^wrote ", r"hidden \d+: crossovers", r"key\(s\) cross"], link),
    "day3-suites": lambda link: excerpt(DAY3 + "suites/gpu-run.log", [r"^\w+: exit \d+ in "], link),
    "budget-regret": lambda link: budget_regret("tuner/runs/2026-12-02-memory-budget/", link),
    "day4-rows": lambda link: ab(
        [(label, paths) for label, paths in ab_runs(
            DAY4 + "call1-rows/",
            ["rows blocked", "rows dealt", "smem weight", "early input", "all three", "rows blocked", "all three", "dealt, smem"],
        ) if label in ("rows blocked", "rows dealt")],
        FUSED_SERIES,
        FUSED_SIZES,
        link,
    ),
    "day4-threads": lambda link: ab(
        ab_runs(DAY4 + "call3-threads/ab/", ["blocks of the rank's size", "blocks of a pass's rows"] * 2),
        FUSED_SERIES + [("all_reduce_add_rmsnorm", "graph", "unfused+one_shot_push")],
        FUSED_SIZES,
        link,
    ),
    **fused_day("day4", DAY4 + "call4-final/bench-fused.csv", DAY4 + "call5-candle/"),
    "day4-sweep-time": lambda link: excerpt(
        [SWEEP4 + f"call{c}/{t}-sweep.log" for c in (2, 4) for t in ("a84ce51", "main")],
        [r"^wrote "],
        link,
    ),
    "day4-sweep-fused": lambda link: excerpt(
        DAY4 + "call4-final/gpu-run.log",
        [r"^wrote ", r"^rewrote ", r"key\(s\) cross", r"^re-fit", r"^verify verdict", r"^tuner( bench.*)?: exit"],
        link,
    ),
    "day4b-layout": lambda link: ab(
        [(label, paths) for label, paths in ab_runs(
            DAY4B + "call1-variants/ab/",
            ["f633f1d", "host layout", "+ input first", "+ input and weight first", "+ input first, one barrier",
             "+ input first, one barrier, norm kernel", "f633f1d", "+ input first, one barrier", "host layout"],
        )],
        [("all_reduce_add_rmsnorm", "graph", a) for a in ("one_shot_push", "unfused+one_shot_push")],
        FUSED_SIZES,
        link,
    ),
    "day4b-final": lambda link: ab(
        ab_runs(DAY4B + "call2-final/ab/", ["f633f1d", "fd84f4a", "fd84f4a + weight first"] * 2),
        FUSED_SERIES + [("all_reduce_add_rmsnorm", "graph", "unfused+one_shot_push")],
        FUSED_SIZES,
        link,
    ),
    "day4b-norm-variants": lambda link: norm_variants(
        DAY4B + "call1-variants/",
        ["fault word first, 1 pack in registers (as before)", "2 packs in registers, weight first",
         "4 packs in registers, weight first", "4 packs, weight first, fault word at the barrier",
         "fault word at the barrier", "fault word first, 1 pack in registers (as before)",
         "4 packs, weight first, fault word at the barrier"],
        link,
    ),
    **fused_day("day4b", DAY4B + "call3-final/run/bench-fused.csv", DAY4B + "call3-final/candle/"),
    "day4b-suites": lambda link: excerpt(DAY4B + "call2-final/suites.txt", [r"^\w+: exit \d+ in "], link),
    "day4b-sweep-fused": lambda link: excerpt(
        DAY4B + "call3-final/gpu-run.log",
        [r"^wrote ", r"^the other hidden sizes measured", r"^rewrote ", r"key\(s\) cross", r"^re-fit",
         r"^verify verdict", r"^tuner( bench.*)?: exit"],
        link,
    ),
    "day4c-weight": lambda link: ab(
        ab_runs(DAY4C + "call3/", ["weight after the barrier (fd84f4a)", "before", "before, rsqrtf"] * 3),
        [("all_reduce_add_rmsnorm", "graph", a) for a in ("one_shot_push", "unfused+one_shot_push")],
        FUSED_SIZES,
        link,
    ),
    "day4c-world-of-one": lambda link: ab(
        ab_runs(DAY4C + "call5/", ["before, rsqrtf", "after, rsqrtf"] * 2)[::-1],
        [("all_reduce_add_rmsnorm", "graph", "unfused")],
        FUSED_SIZES,
        link,
    ),
    "day4c-final": lambda link: fused_pairs(
        DAY4C + "call4/",
        ["late_rsqrt", "early_rsqrt", "late"] * 2,
        [("fd84f4a", "late", "late"), ("this change", "late_rsqrt", "early_rsqrt"),
         ("rsqrtf, the weight after the barrier everywhere", "late_rsqrt", "late_rsqrt")],
        link,
    ),
    "day4c-suites": lambda link: excerpt(DAY4C + "call1/times.txt", [r"^gpu_\w+ "], link),
    "day4d-trace": lambda link: trace_table(
        [("430aa9a", DAY4D + "call1/trace/t-0.log"), ("first input before the call state", DAY4D + "call1/trace/t-5.log"),
         ("the lanes' warp", DAY4D + "call3/trace/t-lanes.log")],
        "k2", 8 * KIB, link,
    ),
    "day4d-trace-unfused": lambda link: "\n\n".join(
        trace_table([("430aa9a", DAY4D + "call1/trace/t-0.log")], kind, 8 * KIB if kind == "k1" else 4096, link)
        for kind in ("k1", "k3")
    ),
    "day4d-variants": lambda link: ab(
        ab_runs(DAY4D + "call1/ab/", ["430aa9a", "call state .gpu", "two polls (150 cycles)", "weight before the barrier",
                                      "first input first", "first input and residual first", "two polls (300 cycles)",
                                      "430aa9a", "call state .gpu", "first input first", "two polls (150 cycles)"]),
        [("all_reduce_add_rmsnorm", "graph", a) for a in ("one_shot_push", "unfused+one_shot_push")],
        FUSED_SIZES,
        link,
    ),
    "day4d-lanes": lambda link: fused_pairs(
        DAY4D + "call3/ab/", ["head", "lanes"] * 3, [("430aa9a", "head", "head"), ("the lanes' warp", "lanes", "lanes")], link
    ),
    "day4d-lanes-again": lambda link: fused_pairs(
        DAY4D + "call4/ab/", ["lanes", "head"] * 3, [("430aa9a", "head", "head"), ("the lanes' warp", "lanes", "lanes")], link
    ),
    "day4d-lanes-eager": lambda link: fused_pairs(
        DAY4D + "call3/ab-eager/", ["head", "lanes"] * 2,
        [("430aa9a", "head", "head"), ("the lanes' warp", "lanes", "lanes")], link, mode="eager",
    ),
    **fused_day("day4d", DAY4D + "call3/run/bench-fused.csv", DAY4D + "call3/candle/"),
    "day4d-suites": lambda link: excerpt(
        [DAY4D + f"call{c}/times.txt" for c in (1, 2, 3, 4)], [r"^(gpu_\w+|kernels_unit|nvrtc_compile|gpu-run.sh [\w ]+|candle-tp): "], link
    ),
    "day4d-sweep-fused": lambda link: excerpt(
        DAY4D + "call2/run/tuner-sweep.log",
        [r"^wrote ", r"^the other hidden sizes measured", r"^rewrote ", r"key\(s\) cross", r"^warning: "],
        link,
    ),
}


def render(name, doc):
    here = os.path.dirname(doc)
    link = lambda p: f"[`{p}`]({os.path.relpath(p, here or '.')})"
    return "\n" + BLOCKS[name](link) + "\n\n"


def main():
    if sys.argv[1:] not in (["--check"], ["--write"]):
        print(__doc__, file=sys.stderr)
        return 2
    write = sys.argv[1] == "--write"
    problems, used = [], set()
    for doc in DOCS:
        text = read(doc)

        def replace(m):
            used.add(m[2])
            if m[2] not in BLOCKS:
                problems.append(f"{doc}: block `{m[2]}` is not in scripts/figures.py's BLOCKS")
                return m[0]
            try:
                want = render(m[2], doc)
            except Exception as e:  # a data file or a figure the block needs is missing
                problems.append(f"{doc}: block `{m[2]}` cannot be rendered: {e!r}")
                return m[0]
            if m[3] != want and not write:
                diff = difflib.unified_diff(m[3].splitlines(), want.splitlines(), "document", "data", lineterm="", n=0)
                problems.append(f"{doc}: block `{m[2]}` differs from its data:\n" + "\n".join(list(diff)[2:12]))
            return m[1] + want + m[4]

        new = BLOCK.sub(replace, text)
        if write and new != text:
            with open(os.path.join(ROOT, doc), "w", encoding="utf-8") as f:
                f.write(new)
    problems += [f"block `{n}` is in no document" for n in BLOCKS if n not in used]
    for p in problems:
        print(f"figures: {p}", file=sys.stderr)
    if problems:
        print("figures: scripts/figures.py --write renders the blocks again; review the diff", file=sys.stderr)
        return 1
    print(f"figures: {len(used)} blocks {'written' if write else 'match the committed data'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
