"""Notebook 01's trap lesson as one static HTML page: sliders for M, k, G and c, no kernel, no network.

The page holds every number it can show, computed here by the package: for each group size of
:data:`PAGE_GROUP_SIZES`, each k and each M of the lesson's grid (:data:`~robustgrpo.book.outlier_poisoning.engine.M_GRID`),
the group's mean, median, std and MAD (as :func:`~robustgrpo.book.outlier_poisoning.engine.trap_data` computes them)
and each estimator's advantage of a wrong answer, a correct one and the glitch, with the reward range
undeclared (as :func:`~robustgrpo.book.outlier_poisoning.engine.trap_data`) and declared (:data:`DECLARED_RANGE`, the
glitch outside it masked: :func:`~robustgrpo.advantages.compute_advantages` with ``reward_range``).

The clip c enters only as a clamp: the clipped estimators (seed_mad, robust, huber_m) compute their
advantages without c and clamp them to [-c, c] last, so the page stores them unclipped and its script
clamps them, as the package does (the displayed value is the same: c has one decimal, so rounding to
four decimals commutes with the clamp). Every number is stored as the readout prints it (4 decimals,
:func:`~robustgrpo.book.outlier_poisoning.widget.trap_readout_html`); a run of equal values along M is stored once.
The script only looks numbers up, clamps and draws: it computes none of them.

The page has no request to make: no script, font or style from elsewhere; the chart is SVG drawn by
the page's own script. ``python -m robustgrpo trap-page --out DIR`` writes it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from robustgrpo.advantages import ESTIMATORS, compute_advantages
from robustgrpo.lab.catalogue import clip_setting
from robustgrpo.checks import check_int
from robustgrpo.lab.files import make_folder
from robustgrpo.lab.reductions import mad, median
from robustgrpo.book.outlier_poisoning.engine import (CLIP_RANGE, DEFAULT_STATE, ESTIMATOR_CHOICES, GROUP_SIZE_RANGE, M_GRID, M_RANGE,
                                         grpo_crossing, trap_rewards)

__all__ = ["PAGE_GROUP_SIZES", "PAGE_METHODS", "DECLARED_RANGE", "PAGE_NAME", "trap_page_tables", "write_trap_page"]

#: Group sizes of the page's G slider. The live lesson goes further; every G adds its G - 1 values of k, and
#: 2 .. 16 keeps the page under 1 MB (the test holds it).
PAGE_GROUP_SIZES: tuple[int, ...] = tuple(range(2, 17))
#: The estimators the page shows: the live lesson's default choice.
PAGE_METHODS: tuple[str, ...] = tuple(DEFAULT_STATE["methods"])
#: The reward range the reader can declare: 0/1 rewards; a glitch outside it is masked (advantage 0).
DECLARED_RANGE: tuple[float, float] = (0.0, 1.0)
#: The file :func:`write_trap_page` writes into a folder.
PAGE_NAME = "trap_lesson.html"
#: A value large enough never to clip: the clipped estimators' advantages before the page's clamp.
_NO_CLIP = 1e300
_ROLES = ("wrong", "correct", "glitch")


def _text(value: float) -> str:
    """A number as the lesson's readout prints it (``n/a`` for NaN)."""
    return "n/a" if value != value else f"{value:.4f}"


def _runs(values: Sequence[str]) -> str:
    """``values`` as ``v,v*3,...``: a run of n > 1 equal values is written once with ``*n``."""
    runs: list[list[Any]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return ",".join(v if n == 1 else f"{v}*{n}" for v, n in runs)


def _group_tables(G: int, methods: Sequence[str]) -> dict[str, Any]:
    """The tables of every k of group size G: ``{k: {"stats": ..., "plain": ..., "declared": ...}}``."""
    ks = range(1, G)
    # one row per (k, M): the group of trap_rewards with the glitch at M
    groups = torch.as_tensor(np.stack([trap_rewards(float(M), k, G) for k in ks for M in M_GRID]))
    out: dict[str, Any] = {}
    advantages = {}
    for declared in (False, True):
        for m in methods:
            clip = clip_setting(m, _NO_CLIP)
            extra = {"reward_range": DECLARED_RANGE} if declared else {}
            advantages[declared, m] = compute_advantages(groups, m, tie_reference="group", **clip, **extra).advantages.numpy()
    n = M_GRID.size
    for i, k in enumerate(ks):
        rows = slice(i * n, (i + 1) * n)
        block = groups[rows]
        stats = {  # each row as trap_data computes it from a group of one row
            "mean": [_text(float(g.unsqueeze(0).mean())) for g in block],
            "median": [_text(float(median(g))) for g in block],
            "std": [_text(float(g.unsqueeze(0).std(correction=1))) for g in block],
            "mad": [_text(float(mad(g))) for g in block],
        }
        where = {"wrong": 0 if G - k - 1 > 0 else None, "correct": G - k - 1, "glitch": G - 1}
        cell: dict[str, Any] = {"stats": {key: _runs(v) for key, v in stats.items()}}
        for declared in (False, True):
            cell["declared" if declared else "plain"] = {
                m: {role: _runs(["n/a"] * n if j is None else [_text(float(v)) for v in advantages[declared, m][rows, j]])
                    for role, j in where.items()}
                for m in methods
            }
        out[str(k)] = cell
    return out


def trap_page_tables(group_sizes: Sequence[int] = PAGE_GROUP_SIZES,
                     methods: Sequence[str] = PAGE_METHODS) -> dict[str, Any]:
    """Every number the page can show, as the page's script reads them.

    Parameters
    ----------
    group_sizes : sequence of int
        The G slider's values (each >= 2, increasing by 1).
    methods : sequence of str
        Estimators to show (the live lesson's choices).

    Returns
    -------
    dict
        ``M`` (the M grid), ``methods``, ``colours``, ``clipped`` (the methods the clamp applies to),
        ``sizes`` and ``cells[G][k]``: ``stats`` (mean, median, std, mad) and ``plain`` / ``declared``
        (per method and role, unclipped), each a run-length string over the M grid.

    Raises
    ------
    ValueError
        An empty, non-consecutive or too small ``group_sizes``; an unknown or batch-level method.
    """
    sizes = [check_int("group size", G, minimum=2, hint="pass group sizes such as range(2, 17)") for G in group_sizes]
    if not sizes or sizes[0] < 2 or sizes != list(range(sizes[0], sizes[0] + len(sizes))):
        raise ValueError(f"group_sizes must be consecutive integers from 2 up, e.g. range(2, 17); got {list(group_sizes)!r}")
    unknown = [m for m in methods if m not in ESTIMATOR_CHOICES]
    if not methods or unknown:
        raise ValueError(f"methods must be among {list(ESTIMATOR_CHOICES)}, got {list(methods)!r}")
    return {
        "M": [float(M) for M in M_GRID],
        "methods": list(methods),
        "colours": {m: ESTIMATORS[m].colour for m in methods},
        "clipped": [m for m in methods if ESTIMATORS[m].clip is not None],
        "sizes": sizes,
        "crossing": {str(G): {str(k): f"{grpo_crossing(k, G):g}" for k in range(1, G)} for G in sizes},
        "cells": {str(G): _group_tables(G, methods) for G in sizes},
    }


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:12px 16px;
color:#1a1a1a;background:#fff;line-height:1.45}
h1{font-size:1.5em;margin:.3em 0}
.rg-page{display:grid;grid-template-columns:minmax(260px,340px) 1fr;gap:0 16px;align-items:start;
grid-template-areas:"controls readout" "try readout";grid-template-rows:auto 1fr}
.rg-controls{grid-area:controls}.rg-try-box{grid-area:try}.rg-readout{grid-area:readout}
@media (max-width:760px){.rg-page{grid-template-columns:1fr;grid-template-areas:"controls" "readout" "try"}
.rg-readout{margin-top:14px}}
.rg-controls label{display:block;font-size:14px;margin-top:8px}
.rg-controls input[type=range]{width:100%}
.rg-controls output{font-weight:bold}
.rg-try{font-size:14px;padding-left:1.3em}
.rg-alert{color:#a33}
table{border-collapse:collapse;font-size:13px;margin-top:6px}
th,td{padding:1px 6px;text-align:right}th:first-child,td:first-child{text-align:left}
.rg-swatch{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
svg{width:100%;height:auto;max-width:720px}
code{background:#f3f3f3;padding:0 3px;border-radius:3px}
"""

_SCRIPT = r"""
(function () {
  var D = JSON.parse(document.getElementById('rg-data').textContent);
  var cache = {};
  function expand(text) {
    var out = [];
    text.split(',').forEach(function (part) {
      var star = part.lastIndexOf('*');
      if (star < 0) { out.push(part); return; }
      var value = part.slice(0, star), n = parseInt(part.slice(star + 1), 10);
      for (var i = 0; i < n; i++) out.push(value);
    });
    return out;
  }
  function series(G, k, path) {
    var key = G + '|' + k + '|' + path.join('|');
    if (!cache[key]) {
      var node = D.cells[G][k];
      path.forEach(function (p) { node = node[p]; });
      cache[key] = expand(node);
    }
    return cache[key];
  }
  function clamp(text, c) {
    if (text === 'n/a') return text;
    var x = parseFloat(text);
    if (x > c) return c.toFixed(4);
    if (x < -c) return (-c).toFixed(4);
    return text;
  }
  var el = function (id) { return document.getElementById(id); };
  var inputs = {M: el('rg-M'), k: el('rg-k'), G: el('rg-G'), c: el('rg-c'), declared: el('rg-declared')};
  function state() {
    var G = parseInt(inputs.G.value, 10);
    inputs.k.max = String(G - 1);
    if (parseInt(inputs.k.value, 10) > G - 1) inputs.k.value = String(G - 1);
    return {M: parseFloat(inputs.M.value), k: parseInt(inputs.k.value, 10), G: G, c: parseFloat(inputs.c.value),
            declared: inputs.declared.checked};
  }
  function put(key, text) {
    document.querySelectorAll('[data-key="' + key + '"]:not([data-method])').forEach(function (n) { n.textContent = text; });
  }
  function draw(s) {
    var i = D.M.indexOf(s.M), table = s.declared ? 'declared' : 'plain';
    put('M', s.M.toFixed(1)); put('k', String(s.k)); put('G', String(s.G)); put('c', s.c.toFixed(1));
    put('wrong-count', String(s.G - s.k - 1));
    ['mean', 'median', 'std', 'mad'].forEach(function (key) { put(key, series(s.G, s.k, ['stats', key])[i]); });
    var crossing = D.crossing[s.G][s.k];
    put('crossing', crossing);
    el('rg-side').textContent = s.M > parseFloat(crossing)
      ? 'above it, as now, grpo pushes the correct answers down' : 'below it, as now, grpo still pushes them up';
    el('rg-side').className = s.M > parseFloat(crossing) ? 'rg-alert' : '';
    var outside = s.M < D.range[0] || s.M > D.range[1];
    el('rg-range').textContent = !s.declared ? 'not declared: every estimator sees the glitch'
      : (outside ? 'declared (' + D.range.join(', ') + '): the glitch lies outside it and is masked (advantage 0)'
                 : 'declared (' + D.range.join(', ') + '): the glitch lies inside it and counts as a reward');
    D.methods.forEach(function (m) {
      var clipped = D.clipped.indexOf(m) >= 0;
      ['wrong', 'correct', 'glitch'].forEach(function (role) {
        var text = series(s.G, s.k, [table, m, role])[i];
        document.querySelector('td[data-method="' + m + '"][data-key="' + role + '"]').textContent =
          clipped ? clamp(text, s.c) : text;
      });
    });
    chart(s, table);
  }
  function chart(s, table) {
    var W = 640, H = 300, L = 48, R = 12, T = 12, B = 40;
    var curves = D.methods.map(function (m) {
      var clipped = D.clipped.indexOf(m) >= 0;
      return series(s.G, s.k, [table, m, 'correct']).map(function (t) { return parseFloat(clipped ? clamp(t, s.c) : t); });
    });
    var lo = -1, hi = 1;
    curves.forEach(function (ys) { ys.forEach(function (y) { lo = Math.min(lo, y); hi = Math.max(hi, y); }); });
    var pad = 0.05 * (hi - lo); lo -= pad; hi += pad;
    var x = function (M) { return L + (W - L - R) * (M - D.M[0]) / (D.M[D.M.length - 1] - D.M[0]); };
    var y = function (A) { return T + (H - T - B) * (hi - A) / (hi - lo); };
    var svg = ['<rect x="' + L + '" y="' + T + '" width="' + (W - L - R) + '" height="' + (H - T - B) + '" fill="none" stroke="#ccc"/>'];
    [lo, 0, hi].forEach(function (A) {
      svg.push('<line x1="' + L + '" x2="' + (W - R) + '" y1="' + y(A) + '" y2="' + y(A) + '" stroke="' + (A === 0 ? '#999' : '#eee') + '"/>');
      svg.push('<text x="' + (L - 4) + '" y="' + (y(A) + 4) + '" text-anchor="end" font-size="11">' + A.toFixed(1) + '</text>');
    });
    [0, 10, 20, 30, 40, 50].forEach(function (M) {
      svg.push('<text x="' + x(M) + '" y="' + (H - B + 14) + '" text-anchor="middle" font-size="11">' + M + '</text>');
    });
    svg.push('<text x="' + ((L + W - R) / 2) + '" y="' + (H - 6) + '" text-anchor="middle" font-size="12">glitch reward M</text>');
    svg.push('<text transform="translate(12,' + ((T + H - B) / 2) + ') rotate(-90)" text-anchor="middle" font-size="12">A of a correct answer</text>');
    var star = parseFloat(D.crossing[s.G][s.k]);
    svg.push('<line x1="' + x(star) + '" x2="' + x(star) + '" y1="' + T + '" y2="' + (H - B) + '" stroke="#444" stroke-dasharray="4 3"/>');
    svg.push('<text x="' + (x(star) + 4) + '" y="' + (T + 12) + '" font-size="11">M* = ' + star + '</text>');
    svg.push('<line x1="' + x(s.M) + '" x2="' + x(s.M) + '" y1="' + T + '" y2="' + (H - B) + '" stroke="#000" stroke-width="1.5"/>');
    D.methods.forEach(function (m, j) {
      var points = curves[j].map(function (A, n) { return x(D.M[n]).toFixed(1) + ',' + y(A).toFixed(1); }).join(' ');
      svg.push('<polyline fill="none" stroke-width="2" stroke="' + D.colours[m] + '" points="' + points + '"><title>' + m + '</title></polyline>');
    });
    el('rg-chart').innerHTML = svg.join('');
  }
  function update() {
    var s = state();
    ['M', 'k', 'G', 'c'].forEach(function (name) {
      var out = el('rg-' + name + '-value');
      out.textContent = name === 'M' || name === 'c' ? s[name].toFixed(1) : String(s[name]);
      inputs[name].setAttribute('aria-valuetext', out.textContent);
    });
    draw(s);
    document.body.setAttribute('data-drawn', [s.M, s.k, s.G, s.c, s.declared].join('|'));
  }
  ['M', 'k', 'G', 'c', 'declared'].forEach(function (name) { inputs[name].addEventListener('input', update); });
  update();
})();
"""


def _page(tables: dict[str, Any]) -> str:
    """The page's HTML: controls, the three steps, the readout, the chart, the data and the script."""
    data = dict(tables, range=list(DECLARED_RANGE))
    G0, k0, M0, c0 = DEFAULT_STATE["G"], DEFAULT_STATE["k"], DEFAULT_STATE["M"], DEFAULT_STATE["c"]
    if G0 not in tables["sizes"]:
        G0, k0 = tables["sizes"][-1], 1
    step_M = float(M_GRID[1] - M_GRID[0])
    rows = "".join(
        f'<tr><td><span class="rg-swatch" style="background:{tables["colours"][m]}"></span>{html.escape(m)}</td>'
        + "".join(f'<td data-method="{m}" data-key="{role}"></td>' for role in _ROLES) + "</tr>"
        for m in tables["methods"]
    )
    star = grpo_crossing(k0, G0)
    span = f"({DECLARED_RANGE[0]:g}, {DECLARED_RANGE[1]:g})"
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    slider = ('<label for="rg-{name}">{label} = <output id="rg-{name}-value"></output></label>'
              '<input type="range" id="rg-{name}" aria-label="{label}" min="{lo}" max="{hi}" step="{step}" value="{value}">')
    controls = "".join([
        slider.format(name="M", label="glitch reward M", lo=M_RANGE[0], hi=M_RANGE[1], step=step_M, value=M0),
        slider.format(name="k", label="correct answers k", lo=1, hi=G0 - 1, step=1, value=k0),
        slider.format(name="G", label="group size G", lo=tables["sizes"][0], hi=tables["sizes"][-1], step=1, value=G0),
        slider.format(name="c", label="clip c", lo=CLIP_RANGE[0], hi=CLIP_RANGE[1], step=0.1, value=c0),
        f'<label><input type="checkbox" id="rg-declared"> declare the reward range {span}</label>',
    ])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>The mean-variance trap, live: one judge glitch in a group of 0/1 rewards</title>
<style>{_STYLE}</style></head>
<body>
<h1>The mean-variance trap, live</h1>
<p>A group of G answers to one prompt: k are correct (reward 1), one got a judge glitch of reward M, the
other G &minus; k &minus; 1 are wrong (reward 0). Each estimator turns the rewards into advantages; a
correct answer should get a positive one. Every number on this page was computed by the robustgrpo package
for the setting shown (the clip c clamps the clipped estimators); nothing here needs a server.</p>
<div class="rg-page">
<div class="rg-controls">{controls}</div>
<div class="rg-try-box"><h2 style="font-size:1.1em">Try this</h2>
<ol class="rg-try">
<li>Push M past M* = G &minus; k (the dashed line): grpo's advantage of a correct answer turns negative.</li>
<li>Set k = 4 (with G = 8): M* drops to G &minus; k = 4, and the median is now 1, so seed_mad and robust
give the correct answers 0 and only the wrong ones a signal.</li>
<li>Declare the range: the glitch lies outside {span} and is masked; it gets 0, and every other answer gets
what its estimator gives the group without the glitch.</li>
</ol>
</div>
<div class="rg-readout">
<div>G = <span data-key="G"></span>: <span data-key="k"></span> correct (1), <span data-key="wrong-count"></span> wrong (0),
a glitch M = <span data-key="M"></span>; clip c = <span data-key="c"></span>.</div>
<div>mean <b><span data-key="mean"></span></b> &middot; median <b><span data-key="median"></span></b> &middot;
std <b><span data-key="std"></span></b> &middot; MAD <b><span data-key="mad"></span></b></div>
<div>grpo's advantage of a correct answer crosses 0 at M* = G &minus; k =
<b><span data-key="crossing">{star:g}</span></b>: <span id="rg-side"></span></div>
<div>The reward range: <span id="rg-range"></span></div>
<table><tr><th>estimator</th><th>A wrong</th><th>A correct</th><th>A glitch</th></tr>{rows}</table>
<svg id="rg-chart" viewBox="0 0 640 300" role="img" aria-label="a correct answer's advantage as the glitch reward M moves, one line per estimator"></svg>
<p style="font-size:13px">The live lesson, with {len(ESTIMATOR_CHOICES)} estimators to choose from and G up to {GROUP_SIZE_RANGE[1]}, runs in Jupyter:
<code>voila notebooks/dashboards/01_trap.ipynb</code>.</p>
</div></div>
<script type="application/json" id="rg-data">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write_trap_page(path: str | Path, *, group_sizes: Sequence[int] = PAGE_GROUP_SIZES,
                    methods: Sequence[str] = PAGE_METHODS) -> Path:
    """Write the static trap lesson (one self-contained HTML file) and return its path.

    Parameters
    ----------
    path : str or Path
        A folder (the page is written into it as :data:`PAGE_NAME`, the folder made if missing) or a
        file name ending in ``.html``.
    group_sizes, methods
        As :func:`trap_page_tables`.

    Returns
    -------
    Path
        The page.
    """
    path = Path(path)
    if path.suffix != ".html":
        path = make_folder(path) / PAGE_NAME
    else:
        make_folder(path.parent)
    path.write_text(_page(trap_page_tables(group_sizes, methods)), encoding="utf-8")
    return path
