#!/usr/bin/env python3
"""The Figure 1 table and plot from `accelerated/scripts/figure1.sh`'s evaluations.

Reads OUT/eval/<variant>-s<seed>/eval.json (fire-lm eval, one run each), OUT/wall-times.tsv and
OUT/machine-*.txt, and writes into OUT:

  table.md       mean ± sample standard deviation over the finished seeds (n shown) of the
                 held-out log-perplexity (nats/byte) at every length, the same-text view
                 (positions < 128 and >= 128 of the 2 048 windows) and training wall time
  summary.json   every number the table shows, plus each seed's value
  figure1.svg    log-perplexity against length, one line per variant (the mean), the band
                 spanning the seeds' minimum to maximum, each seed as a dot
  question.svg   the same for FIRE's variants, with FIRE and Kerple-log for reference

Standard library only (no matplotlib), so a clean clone needs nothing but python3.
"""

import argparse
import json
import math
import statistics
from pathlib import Path

LABELS = {
    "kerple-log": "Kerple-log", "alibi": "Alibi", "t5": "T5", "rope": "RoPE", "nope": "NoPE",
    "fire": "FIRE", "fire-s": "FIRE-S", "fire-depth2": "FIRE, 2 hidden layers",
    "fire-l64": "FIRE, L_init/T = 1/2", "fire-l128": "FIRE, L_init/T = 1",
    "fire-kerple-init": "FIRE from Kerple-log (Thm 3.1)", "fire-offsets": "FIRE + random offsets",
}
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aa4499"]


def load(out, variants, seeds):
    """{variant: {seed: report}} for every evaluation present."""
    found = {}
    for v in variants:
        for s in seeds:
            p = out / "eval" / f"{v}-s{s}" / "eval.json"
            if p.is_file():
                found.setdefault(v, {})[s] = json.loads(p.read_text())[0]
    return found


def stats(xs):
    m = statistics.fmean(xs)
    # null in summary.json (not NaN, which is not JSON) until a second seed exists.
    sd = statistics.stdev(xs) if len(xs) > 1 else None
    return {"mean": m, "sd": sd, "min": min(xs), "max": max(xs), "n": len(xs), "values": xs}


def cell(st, bold=False):
    if st is None:
        return "—"
    s = f"{st['mean']:.4f}"
    if st["n"] > 1:
        s += f" ± {st['sd']:.4f}"
    if bold:
        s = f"**{s}**"
    return s


def summarise(found, lengths, split_len, wall):
    out = {}
    for v, by_seed in found.items():
        seeds = sorted(by_seed)
        row = {"seeds": seeds, "lengths": {}}
        for n in lengths:
            xs = [r["log_ppl"] for s in seeds for r in by_seed[s]["results"] if r["length"] == n]
            if len(xs) == len(seeds):
                row["lengths"][n] = stats(xs)
        before = [r.get("log_ppl_before") for s in seeds for r in by_seed[s]["results"] if r["length"] == split_len]
        after = [r.get("log_ppl_after") for s in seeds for r in by_seed[s]["results"] if r["length"] == split_len]
        if before and all(b is not None for b in before):
            row["same_text_before"] = stats(before)
            row["same_text_after"] = stats(after)
            row["same_text_gap"] = stats([a - b for a, b in zip(after, before)])
        ws = [wall[(v, s)] for s in seeds if (v, s) in wall]
        if ws:
            row["wall_s"] = stats(ws)
        out[v] = row
    return out


def table(summary, order, lengths, split_len, nseeds, header):
    lines = [header, "",
             "| encoding | seeds | " + " | ".join(str(n) for n in lengths)
             + f" | {split_len}-window: pos < 128 | pos ≥ 128 | ≥ minus < | train wall (min) |",
             "|---" * (len(lengths) + 6) + "|"]
    best = {}
    for n in lengths:
        vals = [(summary[v]["lengths"][n]["mean"], v) for v in order if v in summary and n in summary[v]["lengths"]]
        if vals:
            best[n] = min(vals)[1]
    for v in order:
        if v not in summary:
            lines.append(f"| {LABELS.get(v, v)} | 0 of {nseeds} | " + " | ".join("—" for _ in lengths) + " | — | — | — | — |")
            continue
        r = summary[v]
        cells = [cell(r["lengths"].get(n), best.get(n) == v) for n in lengths]
        w = r.get("wall_s")
        wall = f"{w['mean'] / 60:.0f}" if w else "—"
        lines.append(f"| {LABELS.get(v, v)} | {len(r['seeds'])} of {nseeds} | " + " | ".join(cells)
                     + f" | {cell(r.get('same_text_before'))} | {cell(r.get('same_text_after'))}"
                     + f" | {cell(r.get('same_text_gap'))} | {wall} |")
    return "\n".join(lines) + "\n"


def svg_plot(path, title, summary, found, order, lengths):
    W, H, L, R, T, B = 760, 480, 70, 230, 40, 55
    pts = [r["log_ppl"] for v in order if v in found for rep in found[v].values() for r in rep["results"]]
    if not pts:
        return
    lo, hi = min(pts), max(pts)
    pad = (hi - lo) * 0.05 or 0.05
    lo, hi = lo - pad, hi + pad
    lx = [math.log2(n) for n in lengths]
    X = lambda n: L + (math.log2(n) - lx[0]) / ((lx[-1] - lx[0]) or 1) * (W - L - R)
    Y = lambda y: T + (hi - y) / (hi - lo) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{(W - R + L) / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    for n in lengths:
        o.append(f'<line x1="{X(n):.1f}" y1="{H - B}" x2="{X(n):.1f}" y2="{H - B + 5}" stroke="black"/>')
        o.append(f'<text x="{X(n):.1f}" y="{H - B + 18}" text-anchor="middle">{n}</text>')
    steps = 6
    for k in range(steps + 1):
        y = lo + (hi - lo) * k / steps
        o.append(f'<line x1="{L - 5}" y1="{Y(y):.1f}" x2="{L}" y2="{Y(y):.1f}" stroke="black"/>')
        o.append(f'<line x1="{L}" y1="{Y(y):.1f}" x2="{W - R}" y2="{Y(y):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L - 8}" y="{Y(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    o.append(f'<text x="{(W - R + L) / 2}" y="{H - 12}" text-anchor="middle">evaluation length (bytes; training length 128)</text>')
    o.append(f'<text x="16" y="{(H - B + T) / 2}" text-anchor="middle" transform="rotate(-90 16 {(H - B + T) / 2})">held-out log-perplexity (nats/byte)</text>')
    for k, v in enumerate(o_ for o_ in order if o_ in summary):
        c = COLOURS[k % len(COLOURS)]
        r = summary[v]
        ns = [n for n in lengths if n in r["lengths"]]
        if len(r["seeds"]) > 1:
            top = " ".join(f"{X(n):.1f},{Y(r['lengths'][n]['max']):.1f}" for n in ns)
            bot = " ".join(f"{X(n):.1f},{Y(r['lengths'][n]['min']):.1f}" for n in reversed(ns))
            o.append(f'<polygon points="{top} {bot}" fill="{c}" fill-opacity="0.18" stroke="none"/>')
        line = " ".join(f"{X(n):.1f},{Y(r['lengths'][n]['mean']):.1f}" for n in ns)
        o.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        for n in ns:
            for y in r["lengths"][n]["values"]:
                o.append(f'<circle cx="{X(n):.1f}" cy="{Y(y):.1f}" r="2" fill="{c}" fill-opacity="0.6"/>')
        ly = T + 10 + 20 * k
        o.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{c}" stroke-width="3"/>')
        o.append(f'<text x="{W - R + 46}" y="{ly + 4}">{LABELS.get(v, v)} (n={len(r["seeds"])})</text>')
    o.append(f'<text x="{W - R + 15}" y="{H - B}" font-size="10" fill="#555">line: mean; band: min–max over seeds</text>')
    o.append("</svg>")
    path.write_text("\n".join(o) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--seeds", default="0 1 2")
    p.add_argument("--steps", default="2400")
    p.add_argument("--main", default="kerple-log alibi t5 rope nope fire fire-s")
    p.add_argument("--question", default="fire-depth2 fire-l64 fire-l128 fire-kerple-init fire-offsets")
    p.add_argument("--lengths", default="128,256,512,1024,2048")
    a = p.parse_args()
    out = Path(a.out)
    seeds = [int(s) for s in a.seeds.split()]
    main_v, question = a.main.split(), a.question.split()
    lengths = [int(n) for n in a.lengths.split(",")]
    found = load(out, main_v + question, seeds)
    wall = {}
    wt = out / "wall-times.tsv"
    if wt.is_file():
        for line in wt.read_text().splitlines():
            f = line.split("\t")
            if len(f) >= 3:
                wall[(f[0], int(f[1]))] = wall.get((f[0], int(f[1])), 0) + float(f[2])
    summary = summarise(found, lengths, lengths[-1], wall)
    machine = "\n".join((out / m).read_text().strip() for m in ("machine-start.txt", "machine-end.txt") if (out / m).is_file())
    done = sum(len(found.get(v, {})) for v in main_v + question)
    total = len(seeds) * len(main_v + question)
    head = (f"Held-out log-perplexity (nats/byte), mean ± sample s.d. over the finished seeds; {a.steps} "
            f"steps at length 128; {done} of {total} runs finished. Bold: best mean at that length.")
    md = ["# Figure 1 at a scale that learns", "", "## Seven encodings", "",
          table(summary, main_v, lengths, lengths[-1], len(seeds), head),
          "## The FIRE question (same recipe, budget and seeds)", "",
          table(summary, ["fire", "kerple-log"] + question, lengths, lengths[-1], len(seeds),
                "FIRE and Kerple-log repeated from above for reference."),
          "## Machine", "", "```", machine, "```", ""]
    (out / "table.md").write_text("\n".join(md))
    (out / "summary.json").write_text(json.dumps(
        {"runs_finished": done, "runs_total": total, "seeds": seeds, "variants": summary},
        indent=1, allow_nan=False))
    svg_plot(out / "figure1.svg", "Figure 1: seven encodings, trained at 128", summary, found, main_v, lengths)
    svg_plot(out / "question.svg", "The FIRE question: variants of FIRE vs Kerple-log", summary, found,
             ["fire", "kerple-log"] + question, lengths)
    print((out / "table.md").read_text())


if __name__ == "__main__":
    main()
