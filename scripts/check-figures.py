#!/usr/bin/env python3
"""Recomputes the figures the docs quote from the committed data and fails
when a doc no longer says what the data gives.

scripts/test.sh runs it. Each claim is a row of CLAIMS below: the document,
the sentence fragment it must contain (with {placeholders}), and a function
that computes the placeholders from committed CSVs, logs or evidence. The
check renders the fragment and looks for it in the document, with every run
of whitespace (line breaks included) read as one space. So a figure that
drifts from its data, or a sentence reworded without its claim, fails here
with both the expected text and where it came from.

To add a figure: write the sentence in the doc, then add a Claim with the
same words and a function reading the file it comes from (the helpers below
read bench CSVs, verify and sweep logs, soak lines). Table claims check every
row of a Markdown table against a CSV.

    scripts/check-figures.py            # check every claim
    scripts/check-figures.py --list     # print each claim as rendered
"""

import csv
import decimal
import json
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
KIB = 1024
MIB = 1024 * 1024


def path(relative):
    return os.path.join(ROOT, relative)


def read(relative):
    with open(path(relative), encoding="utf-8") as f:
        return f.read()


def flat(text):
    return re.sub(r"\s+", " ", text)


# ---------------------------------------------------------------------------
# Readers of the committed data.


def bench(relative):
    """A `tuner bench` CSV: {(collective, dtype, mode, bytes): {algo: row}} for rows that ran."""
    table = defaultdict(dict)
    with open(path(relative), newline="") as f:
        for row in csv.DictReader(f):
            if row["status"] != "ok":
                continue
            key = (row["collective"], row["dtype"], row["mode"], int(row["bytes"]))
            table[key][row["algo"]] = {
                "median": float(row["median_us"]),
                "p10": float(row["p10_us"]),
                "p90": float(row["p90_us"]),
                "busbw": float(row["busbw_gbps"]),
            }
    return table


def best_custom(algos):
    """(algo, row) of the fastest custom algorithm at one size."""
    custom = [(r["median"], a, r) for a, r in algos.items() if a != "nccl"]
    if not custom:
        return None, None
    _, algo, row = min(custom)
    return algo, row


def ratio(table, collective, nbytes, dtype="bf16", mode="graph"):
    """Best custom median over NCCL's at one size."""
    algos = table[(collective, dtype, mode, nbytes)]
    _, row = best_custom(algos)
    return row["median"] / algos["nccl"]["median"]


def verify_log(relative):
    """{key: (median %, worst %, verdict)} from a `tuner verify` log."""
    keys = {}
    pattern = re.compile(
        r"^(\S+ ws\d+ \S+ \S+): \d+ held-out sizes, regret median ([\d.]+)% .*worst ([\d.]+)% .* — (\w+)$"
    )
    for line in read(relative).splitlines():
        m = pattern.match(line)
        if m:
            keys[m.group(1)] = (float(m.group(2)), float(m.group(3)), m.group(4))
    if not keys:
        raise ValueError(f"{relative}: no key lines")
    return keys


def select(keys, collective=None, mode=None):
    return [
        v
        for k, v in keys.items()
        if (collective is None or k.startswith(collective + " "))
        and (mode is None or k.endswith(" " + mode))
    ]


def last_match(relative, pattern):
    matches = re.findall(pattern, read(relative), re.MULTILINE)
    if not matches:
        raise ValueError(f"{relative}: nothing matches {pattern}")
    return matches[-1]


# ---------------------------------------------------------------------------
# Formatting, as the docs write figures.


def pct(value):
    return f"{value:.2f}%"


def span(values, fmt="{:.2f}", unit=""):
    """`0.00–2.73%`, or one value when low and high print the same."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def thousands(value):
    """`15 863`: a whole number (halves rounded up), thousands apart by a space."""
    whole = int(decimal.Decimal(str(value)).quantize(decimal.Decimal(1), decimal.ROUND_HALF_UP))
    return f"{whole:,}".replace(",", " ")


BUDGET_RUNS = "tuner/runs/2026-12-02-memory-budget/"


def budget_row(world, budget):
    """One row of GPU.md's regret table from `tuner fit --memory-budget`'s
    committed report: per collective, the refitted and the capped regrets'
    means and worsts over the keys."""

    def compute():
        rows = [l for l in read(f"{BUDGET_RUNS}fit-ws{world}-{budget}.txt").splitlines() if "regret mean" in l]
        out = {}
        for collective in ["all_reduce", "all_gather"]:
            mine = [l for l in rows if l.strip().startswith(collective)]

            def values(pattern):
                return [float(re.search(pattern, l).group(1)) for l in mine]

            for kind, (mean, worst) in {
                "fit": (r"regret mean ([\d.]+)%", r"regret mean [\d.]+%, worst ([\d.]+)%"),
                "cap": (r"run time: mean ([\d.]+)%", r"run time: mean [\d.]+%, worst ([\d.]+)%"),
            }.items():
                out[f"{collective}_{kind}"] = (
                    f"mean {span(values(mean), '{:.1f}', '%')}, worst {span(values(worst), '{:.1f}', '%')}"
                )
        return out

    return compute


# ---------------------------------------------------------------------------
# The claims.


class Claim:
    def __init__(self, doc, text, compute, source):
        self.doc, self.text, self.compute, self.source = doc, text, compute, source

    def expected(self):
        return self.text.format(**self.compute())


class TableClaim:
    """Every row of the Markdown table whose header starts with `header`:
    column `size` names the output size, the named columns must equal what
    `cell(size, column)` computes from the data."""

    def __init__(self, doc, header, columns, cell, source):
        self.doc, self.header, self.columns, self.cell, self.source = (
            doc,
            header,
            columns,
            cell,
            source,
        )

    def problems(self):
        lines = read(self.doc).splitlines()
        start = next((i for i, l in enumerate(lines) if l.startswith(self.header)), None)
        if start is None:
            return [f"no table starting `{self.header}`"]
        names = [c.strip() for c in lines[start].strip("|").split("|")]
        out = []
        rows = 0
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            rows += 1
            cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
            size = parse_size(cells[0])
            for column in self.columns:
                shown = cells[names.index(column)]
                want = self.cell(size, column)
                if shown != want:
                    out.append(f"row {cells[0]}, column {column}: the doc says {shown}, the data {want}")
        if rows == 0:
            out.append("the table has no rows")
        return out


class ExcerptClaim:
    """The lines of the code block after `marker` in the doc are lines of
    `log` (a quoted run must be what the run printed); `…` lines are elisions."""

    def __init__(self, doc, marker, log):
        self.doc, self.marker, self.log, self.source = doc, marker, log, log

    def problems(self):
        lines = read(self.doc).splitlines()
        start = next((i for i, l in enumerate(lines) if l.strip() == self.marker), None)
        if start is None:
            return [f"no line `{self.marker}`"]
        logged = set(read(self.log).splitlines())
        out = []
        for line in lines[start + 1 :]:
            if line.startswith("```") or line.startswith("$ ") or not line.strip():
                break
            if line.startswith("…"):
                continue
            if line not in logged:
                out.append(f"`{line}` is not in the log")
        return out


def parse_size(text):
    number, unit = re.match(r"([\d.]+)\s*(KiB|MiB|GiB|B)?", text).groups()
    scale = {"KiB": KIB, "MiB": MIB, "GiB": 1 << 30}.get(unit, 1)
    return int(float(number) * scale)


X2 = "kernels/bench/h200-x2.csv"
X4 = "kernels/bench/h200-x4.csv"
VERIFY_WS2 = "tuner/runs/2026-12-01-h200-x2/verify-ws2-final.log"
SWEEP_WS2 = "tuner/runs/2026-12-01-h200-x2/sweep-ws2-final.log"
SHIPPED_EVIDENCE = "tuned/sm90-nvlink.evidence.json"
VERIFY_PUBLISHED_WS2 = "tuner/runs/2026-11-30-h200-x2/verify-published.log"
VERIFY_WS4 = "tuner/runs/2026-11-30-h200-x4-2/verify4.log"
VERIFY_PUBLISHED_WS4 = "tuner/runs/2026-11-30-h200-x4-2/verify4-pub.log"
SWEEP_WS4 = "tuner/runs/2026-11-30-h200-x4-2/sweep4.log"
PROCESSES_DEALT = "kernels/bench/runs/gpu_processes-h200-x2-dealt.log"
SOAK_X4 = "kernels/bench/runs/soak-h200-x4.log"
AB_DEAL = "kernels/bench/runs/ab-2026-12-01/r4-"
AB_PDL = "kernels/bench/runs/ab-2026-11-30/"


def ws2_measured():
    keys = verify_log(VERIFY_WS2)
    assert all(v[0] == 0 for v in keys.values()), "a median is not 0.00%"
    return {
        "took": last_match(SWEEP_WS2, r"measured in ([\dms ]+)\)"),
        "worst": span([v[1] for v in keys.values()], unit="%"),
        "verdict": last_match(VERIFY_WS2, r"^(PASS|FAIL) \(limits"),
    }


def ws2_published():
    keys = verify_log(VERIFY_PUBLISHED_WS2)
    ar = select(keys, "all_reduce")
    assert all(v[0] == 0 for v in ar), "an all-reduce median is not 0.00%"
    return {
        "ag_graph_median": span([v[0] for v in select(keys, "all_gather", "graph")], "{:.0f}", "%"),
        "ar_graph_worst": span([v[1] for v in select(keys, "all_reduce", "graph")], "{:.1f}", "%"),
        "ar_eager_worst": span([v[1] for v in select(keys, "all_reduce", "eager")], "{:.1f}", "%"),
        "ag_graph_worst": span([v[1] for v in select(keys, "all_gather", "graph")], "{:.0f}", "%"),
        "ag_eager_median": span([v[0] for v in select(keys, "all_gather", "eager")], "{:.0f}", "%"),
        "failed": sum(1 for v in keys.values() if v[2] == "FAIL"),
    }


def x2_ratios():
    t = bench(X2)
    small = [ratio(t, "all_reduce", s) for s in (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB)]
    algos16 = t[("all_reduce", "bf16", "graph", 16 * MIB)]
    _, best16 = best_custom(algos16)
    return {
        "t4k": f"{best_custom(t[('all_reduce', 'bf16', 'graph', 4 * KIB)])[1]['median']:.2f}",
        "r4k": f"{ratio(t, 'all_reduce', 4 * KIB):.2f}",
        "r256k": span(small),
        "r1m": f"{ratio(t, 'all_reduce', MIB):.2f}",
        "r2_4m": span([ratio(t, "all_reduce", 2 * MIB), ratio(t, "all_reduce", 4 * MIB)]),
        "r8m": f"{ratio(t, 'all_reduce', 8 * MIB):.2f}",
        "r16m": f"{ratio(t, 'all_reduce', 16 * MIB):.2f}",
        "bw16m": f"{best16['busbw'] / algos16['nccl']['busbw']:.2f}",
        "r64m": f"{ratio(t, 'all_reduce', 64 * MIB):.2f}",
    }


def ws4():
    keys = verify_log(VERIFY_WS4)
    published = verify_log(VERIFY_PUBLISHED_WS4)
    t = bench(X4)
    ag = [ratio(t, "all_gather", s) for s in (KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB)]
    return {
        "points": last_match(SWEEP_WS4, r"\((\d+) points"),
        "worst": pct(max(v[1] for v in keys.values())),
        "pub_ar_graph": f"{published['all_reduce ws4 bf16 graph'][1]:.1f}%",
        "pub_ag_eager": f"{published['all_gather ws4 bf16 eager'][1]:.0f}%",
        "t4k": f"{best_custom(t[('all_reduce', 'bf16', 'graph', 4 * KIB)])[1]['median']:.2f}",
        "r4k": f"{ratio(t, 'all_reduce', 4 * KIB):.2f}",
        "r1m": f"{ratio(t, 'all_reduce', MIB):.2f}",
        "r16m": f"{ratio(t, 'all_reduce', 16 * MIB):.2f}",
        "ag": span(ag),
    }


def ws2_sweep():
    """The recorded world-size-2 sweep: its log's points and time, its evidence's samples."""
    with open(path(SHIPPED_EVIDENCE), encoding="utf-8") as f:
        keys = json.load(f)["keys"]
    samples = sum(len(p["samples_us"]) for k in keys if k["world_size"] == 2 for p in k["points"])
    return {
        "points": last_match(SWEEP_WS2, r"\((\d+) points"),
        "took": last_match(SWEEP_WS2, r"measured in ([\dms ]+)\)"),
        "samples": thousands(samples),
    }


def soak_x4():
    line = re.findall(
        r"soak: replays=100000 seconds=[\d.]+ replays_per_s=([\d.]+) failures=(\d+) wall_s=([\d.]+)",
        read(SOAK_X4),
    )[-1]
    return {"rate": thousands(float(line[0])), "failures": line[1], "wall": line[2]}


def soak():
    line = re.findall(
        r"soak: replays=100000 seconds=([\d.]+) replays_per_s=([\d.]+) failures=(\d+) wall_s=([\d.]+)",
        read(PROCESSES_DEALT),
    )[-1]
    return {
        "seconds": f"{float(line[0]):.2f}",
        "rate": thousands(float(line[1])),
        "failures": line[2],
        "wall": line[3],
    }


def other_dtypes():
    """f16 and f32 against bf16 on 4 GPUs: NCCL and the best custom, graph."""
    t = bench(X4)
    diffs = []
    for (c, d, m, b), algos in t.items():
        if d == "bf16" or m != "graph" or (c, "bf16", m, b) not in t:
            continue
        ref = t[(c, "bf16", m, b)]
        for pick in (lambda a: a.get("nccl"), lambda a: best_custom(a)[1]):
            x, y = pick(algos), pick(ref)
            if x and y:
                diffs.append(x["median"] / y["median"] - 1)
    outside = [d for d in diffs if abs(d) > 0.02]
    return {
        "within": sum(1 for d in diffs if abs(d) <= 0.02),
        "points": len(diffs),
        "others": len(outside),
        "outside": span([abs(d) * 100 for d in outside], "{:.1f}", "%"),
        "faster": "faster" if all(d < 0 for d in outside) else "different",
    }


def spread():
    t = bench(X2)
    rows = [
        r
        for (c, d, m, b), algos in t.items()
        if c == "all_reduce" and m == "graph"
        for r in algos.values()
    ]
    close = [r for r in rows if max(r["median"] - r["p10"], r["p90"] - r["median"]) <= 0.01 * r["median"]]
    widest = max((r["p90"] - r["p10"]) / r["median"] for r in rows)
    return {"close": len(close), "rows": len(rows), "widest": f"{widest * 100:.1f}%"}


def dealing_pull():
    """one_shot_pull dealt against numbered block by block: mean of the two runs of each."""
    runs = {name: bench(AB_DEAL + name + ".csv") for name in ("base", "base2", "deal", "deal2")}

    def change(collective, nbytes):
        key = (collective, "bf16", "graph", nbytes)
        base = sum(runs[n][key]["one_shot_pull"]["median"] for n in ("base", "base2")) / 2
        deal = sum(runs[n][key]["one_shot_pull"]["median"] for n in ("deal", "deal2")) / 2
        return (deal / base - 1) * 100

    ar_slow = [change("all_reduce", s) for s in (16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB)]
    ag_slow = [change("all_gather", s) for s in (64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, MIB)]
    # 1 to 4 MiB per rank: all-reduce 1, 2, 4 MiB; all-gather 2, 4, 8 MiB of output.
    faster = [-change("all_reduce", s) for s in (MIB, 2 * MIB, 4 * MIB)] + [
        -change("all_gather", s) for s in (2 * MIB, 4 * MIB, 8 * MIB)
    ]
    return {
        "ar_slow": span(ar_slow, "{:.0f}", "%"),
        "ag_slow": span(ag_slow, "{:.0f}", "%"),
        "faster": span(faster, "{:.1f}", "%"),
        "ag16m": f"{change('all_gather', 16 * MIB):.1f}%",
    }


def pdl():
    """Programmatic dependent launch: the fastest custom algorithm per size, both A/B pairs."""
    graph_small, graph_large, eager = [], [], []
    for off, on in (("nopdl", "pdl"), ("lamport_nopdl", "lamport_pdl")):
        a, b = bench(AB_PDL + off + ".csv"), bench(AB_PDL + on + ".csv")
        for key, algos in a.items():
            _, x = best_custom(algos)
            _, y = best_custom(b.get(key, {}))
            if x is None or y is None:
                continue
            change = y["median"] - x["median"]
            if key[2] == "eager":
                eager.append(-change)
            elif key[3] <= 2 * MIB:
                graph_small.append(-change)
            else:
                graph_large.append(change)
    return {
        "small": span(graph_small),
        "large_off": f"{-min(graph_large):.2f}",
        "large_on": f"{max(graph_large):.2f}",
        "eager": span(eager, "{:.1f}"),
    }


def x2_table_cell(size, column):
    algos = bench(X2)[("all_reduce", "bf16", "graph", size)]
    if column == "best / NCCL":
        return f"{best_custom(algos)[1]['median'] / algos['nccl']['median']:.2f}"
    key = "nccl" if column == "NCCL" else column
    return f"{algos[key]['median']:.2f}" if key in algos else "declined"


def x4_table_cell(collective):
    def cell(size, column):
        algos = bench(X4)[(collective, "bf16", "graph", size)]
        if column == "best / NCCL":
            return f"{best_custom(algos)[1]['median'] / algos['nccl']['median']:.2f}"
        key = "nccl" if column == "NCCL" else column
        return f"{algos[key]['median']:.2f}" if key in algos else "declined"

    return cell


CLAIMS = [
    # README: what has been measured so far.
    Claim(
        "README.md",
        "measured rows (`tuner sweep --world-sizes 2`, {took} of measuring, 2026-12-01) | 0.00% in every key | {worst} | {verdict}",
        ws2_measured,
        VERIFY_WS2,
    ),
    Claim(
        "README.md",
        "| all-reduce 0.00%; all-gather graph {ag_graph_median} | all-reduce graph {ar_graph_worst} (one-shot pull at 28–112 MiB, where two-shot pull is 1.17x faster), eager {ar_eager_worst} (one-shot push at 20–28 MiB); all-gather graph {ag_graph_worst} (NCCL where one-shot push is 2.2x faster) | FAIL in all {failed} keys |",
        ws2_published,
        VERIFY_PUBLISHED_WS2,
    ),
    Claim(
        "README.md",
        "Eager all-gather regrets of the published rows are far larger (medians {ag_eager_median})",
        ws2_published,
        VERIFY_PUBLISHED_WS2,
    ),
    Claim(
        "README.md",
        "{t4k} µs at 4 KiB ({r4k}x NCCL), {r256k}x up to 256 KiB, {r1m}x at 1 MiB, {r2_4m}x at 2–4 MiB, {r8m}x at 8 MiB, {r16m}x at 16 MiB ({bw16m}x NCCL's bus bandwidth), {r64m}x at 64 MiB",
        x2_ratios,
        X2,
    ),
    Claim(
        "README.md",
        "12 keys, {points} points",
        ws4,
        SWEEP_WS4,
    ),
    Claim(
        "README.md",
        "**PASS**, median regret 0.00% in every key, worst {worst}. The published rows, verified the same way (bf16): **FAIL**, worst {pub_ar_graph} (all-reduce graph) to {pub_ag_eager} (eager all-gather",
        ws4,
        VERIFY_WS4,
    ),
    Claim(
        "README.md",
        "{t4k} µs at 4 KiB ({r4k}x), {r1m}x at 1 MiB, {r16m}x at 16 MiB; all-gather {ag}x up to 1 MiB",
        ws4,
        X4,
    ),
    Claim(
        "README.md",
        "the 100 000-replay soak ran {rate} replays/s with {failures} failures",
        soak,
        PROCESSES_DEALT,
    ),
    # tuner/GUIDE.md
    Claim(
        "tuner/GUIDE.md",
        "the recorded world-size-2 sweep of 2026-12-01 ({points} points, {samples} samples) measured for {took}",
        ws2_sweep,
        f"{SWEEP_WS2} and {SHIPPED_EVIDENCE}",
    ),
    ExcerptClaim("tuner/GUIDE.md", "$ tuner verify tuned/sm90-nvlink.toml --world-sizes 2", VERIFY_WS2),
    ExcerptClaim(
        "tuner/GUIDE.md",
        "$ tuner verify published-sm90-nvlink.toml --world-sizes 2",
        VERIFY_PUBLISHED_WS2,
    ),
    # kernels/GPU.md
    *[
        Claim(
            "kernels/GPU.md",
            f"| {world} | {name} | {{all_reduce_fit}} | {{all_reduce_cap}} | {{all_gather_fit}} | {{all_gather_cap}} |",
            budget_row(world, budget),
            f"{BUDGET_RUNS}fit-ws{world}-{budget}.txt",
        )
        for world in [2, 4]
        for budget, name in [("256MiB", "256 MiB (default)"), ("64MiB", "64 MiB")]
    ],
    TableClaim(
        "kernels/GPU.md",
        "| output size | NCCL | one_shot_push | one_shot_pull | two_shot_pull | two_shot_push | best / NCCL |",
        ["NCCL", "one_shot_push", "one_shot_pull", "two_shot_pull", "two_shot_push", "best / NCCL"],
        x2_table_cell,
        X2,
    ),
    TableClaim(
        "kernels/GPU.md",
        "| bf16 all-reduce | NCCL |",
        ["NCCL", "one_shot_push", "one_shot_pull", "two_shot_pull", "best / NCCL"],
        x4_table_cell("all_reduce"),
        X4,
    ),
    TableClaim(
        "kernels/GPU.md",
        "| bf16 all-gather (output bytes) | NCCL |",
        ["NCCL", "one_shot_push", "one_shot_pull", "best / NCCL"],
        x4_table_cell("all_gather"),
        X4,
    ),
    Claim(
        "kernels/GPU.md",
        "p10 and p90 within 1% of the median for {close} of the {rows} rows; the widest p10–p90 spread is {widest} of the median",
        spread,
        X2,
    ),
    Claim(
        "kernels/GPU.md",
        "f16 and f32 are within 2% of bf16 at {within} of {points} points (NCCL and the best custom algorithm, both collectives); the other {others}, {outside} apart, are all {faster}",
        other_dtypes,
        X4,
    ),
    Claim(
        "kernels/GPU.md",
        "one_shot_pull, dealt, was {ar_slow} slower from 16 to 512 KiB of all-reduce and {ag_slow} slower from 64 KiB to 1 MiB of all-gather output, and {faster} faster from 1 to 4 MiB per rank; at 16 MiB of all-gather output (8 MiB per rank), where the table picks it, it was {ag16m} slower",
        dealing_pull,
        AB_DEAL + "*.csv",
    ),
    Claim(
        "kernels/GPU.md",
        "{small} µs off each graph call from 4 KiB to 2 MiB; from 4 to 32 MiB between {large_off} µs off and {large_on} µs on; {eager} µs off each eager call",
        pdl,
        AB_PDL + "*pdl.csv",
    ),
    Claim(
        "kernels/GPU.md",
        "100 000 replays of 13 calls (nccl 2, one_shot_pull 2, one_shot_push 7, two_shot_pull 1, two_shot_push 1) in {seconds} s, **{rate} replays/s, {failures} failures**, {wall} s wall",
        soak,
        PROCESSES_DEALT,
    ),
    Claim(
        "kernels/GPU.md",
        "100 000 replays, {rate} replays/s, {failures} failures, {wall} s wall",
        soak_x4,
        SOAK_X4,
    ),
]


def main():
    listing = "--list" in sys.argv[1:]
    failures = 0
    for claim in CLAIMS:
        try:
            if isinstance(claim, (TableClaim, ExcerptClaim)):
                problems = claim.problems()
                if listing:
                    print(f"{claim.doc}: {type(claim).__name__} against {claim.source}")
            else:
                expected = claim.expected()
                if listing:
                    print(f"{claim.doc}: {expected}")
                problems = [] if flat(expected) in flat(read(claim.doc)) else [f"it should say: {expected}"]
        except Exception as e:  # a file or figure the claim needs is missing
            problems = [f"cannot compute the claim: {e!r}"]
        for problem in problems:
            failures += 1
            print(f"check-figures: {claim.doc} (from {claim.source}): {problem}", file=sys.stderr)
    if failures:
        print(f"check-figures: {failures} figure(s) differ from the committed data", file=sys.stderr)
        return 1
    print(f"check-figures: {len(CLAIMS)} claims hold against the committed data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
