"""Figures a reader explores by dragging a slider, in Jupyter, on Colab and in the rendered book
(chapters 02, 05 and 06b).

Why Vega-Lite (through Altair). The rendered book has no kernel, so a figure that redraws on a
slider must redraw in the browser. Every state a control can reach is computed in Python when
the notebook runs (the sweeps are small: thresholds x domains, gammas, R x knee x slope) and
handed to Vega-Lite as one table; a slider is a Vega-Lite parameter bound to an HTML input, and
the marks filter the table on it. Altair writes that specification from pandas, Jupyter,
JupyterLab and Colab render it as they render any Altair chart, and the book loads the same
three scripts (vega, vega-lite, vega-embed: about 0.8 MB together, against about 3.5 MB for
plotly.js) from its own `_static/vega/` (vendored from the npm registry by
ci/vendor_widgets.sh with the same lock file as the widget manager; only the rendered pages
point there, ci/build_book.py: an executed notebook keeps each chart as its Vega-Lite spec beside
a PNG of it, which draw offline in any notebook viewer, ci/vega_figures.py). One code path: the
numbers on screen are the rows below, and tests/test_interactive.py holds each row against the
function the chapter calls.

In a reader's running kernel a figure can also recompute: chapter 05's `ThresholdExplorer`
(ipywidgets) calls the same `threshold_state` that `threshold_states` evaluates over the
precomputed grid, on every move of its controls, so the live numbers and the book's figure
cannot disagree (tests/test_live_widgets_ch05.py moves it). The book build shows only the
precomputed figure (`live_kernel`).
"""
from __future__ import annotations

import html
import os
import time
from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from ... import calibration, scheduler
from ...record import Rounds, sigmoid
from ...stepcurve import StepCurve

GREEN, RED, BLUE, GREY = "#31a354", "#de2d26", "#3182bd", "#888888"


def _slider(name: str, values: Sequence[float], value: float, label: str) -> alt.Parameter:
    """A parameter bound to a range input that can take exactly `values` (evenly spaced)."""
    values = sorted(float(v) for v in values)
    step = round(values[1] - values[0], 10) if len(values) > 1 else 1.0
    return alt.param(name=name, value=value, bind=alt.binding_range(min=values[0], max=values[-1], step=step,
                                                                      name=label))


def _near(field: str, param: str) -> str:
    """A Vega expression: the row's `field` equals the parameter (a slider's float steps drift)."""
    return f"abs(datum['{field}'] - {param}) < 1e-6"


# ---------------------------------------------------------------------------------------- chapter 05


CALIBRATED = ("raw", "STS")  # chapter 05's confidences: the head's own, and after Sequential Temperature Scaling


def threshold_state(records: Rounds, threshold: float, calibrator: Any = None, gamma: int | None = None) -> pd.DataFrame:
    """The threshold figure at one point, one row per domain: the blocks are cut before their first
    c_k below `threshold` (`calibration.threshold_sweep` at that one threshold), where c_k are the
    confidences of the full blocks of `records` (raw when `calibrator` is None, else the sigmoid of
    `calibrator.transform(logits)`, a fitted calibrator such as STS) on the first `gamma` slots
    (default: every slot; a block of gamma drafts accepts min(gamma, accepted) of them). The one
    function both the precomputed figure (`threshold_states`) and the live controls
    (`ThresholdExplorer`) call."""
    blocks = records.full_blocks()
    gamma = blocks.width if gamma is None else int(gamma)
    if not 1 <= gamma <= blocks.width:
        raise ValueError(f"gamma must be between 1 and the record's {blocks.width} drafted slots, got {gamma}")
    logits = blocks.logits if calibrator is None else calibrator.transform(blocks.logits)
    confidences = sigmoid(np.asarray(logits)[:, :gamma])
    accepted = np.minimum(blocks.accepted, gamma)
    frames = []
    for domain in blocks.domains:
        rows = blocks.domain == domain
        sweep = calibration.threshold_sweep(confidences[rows], accepted[rows], [float(threshold)])
        frames.append(sweep.reset_index().assign(domain=domain))
    return pd.concat(frames, ignore_index=True)


def threshold_states(records: Rounds, thresholds: Sequence[float], calibrators: Mapping[str, Any] | None = None,
                     gammas: Sequence[int] | None = None) -> pd.DataFrame:
    """Every state of the threshold figure: `threshold_state` at each calibration (name ->
    fitted calibrator, None for the raw head; default: the raw head only), gamma (default: the
    record's full block only) and threshold, per domain: accepted and rejected drafts per round,
    acceptance rate, tau and tokens verified per round, with columns "calibration" and "gamma"."""
    calibrators = {"raw": None} if calibrators is None else dict(calibrators)
    gammas = [records.full_blocks().width] if gammas is None else [int(g) for g in gammas]
    frames = []
    for name, calibrator in calibrators.items():
        for gamma in gammas:
            at = pd.concat([threshold_state(records, threshold, calibrator, gamma) for threshold in thresholds])
            frames.append(at.sort_values(["domain", "threshold"], kind="mergesort").assign(calibration=name, gamma=gamma))
    return pd.concat(frames, ignore_index=True)


def threshold_chart(states: pd.DataFrame, domain: str | None = None, threshold: float | None = None) -> alt.VConcatChart:
    """Figure 5 as a figure to explore: pick a domain, a static threshold and, where `states`
    holds several, the confidences (raw or calibrated) and gamma; the left panel shows accepted
    and rejected drafts per round at every threshold (the chosen one solid) with the acceptance
    rate, the right one tau against the tokens verified per round with the chosen threshold's
    point marked."""
    domains = sorted(states["domain"].unique())
    thresholds = sorted(states["threshold"].unique())
    pick_domain = alt.param(name="domain", value=domain or domains[-1],
                            bind=alt.binding_select(options=domains, name="domain "))
    pick = _slider("threshold", thresholds, threshold if threshold is not None else thresholds[len(thresholds) // 2],
                   "static threshold ")
    picks, where, said = [pick_domain, pick], alt.datum.domain == pick_domain, "datum.domain"
    data = states.assign(rejected=states["rejected_per_round"], accepted=states["accepted_per_round"])
    names = list(pd.unique(states["calibration"])) if "calibration" in states else []
    if len(names) > 1:
        pick_cal = alt.param(name="calibration", value=names[0], bind=alt.binding_select(options=names,
                                                                                         name="confidences "))
        picks, where, said = picks + [pick_cal], where & (alt.datum.calibration == pick_cal), said + " + ', ' + datum.calibration"
    gammas = sorted(int(g) for g in states["gamma"].unique()) if "gamma" in states else []
    if len(gammas) > 1:
        pick_gamma = _slider("gamma", gammas, gammas[-1], "gamma ")
        picks, where, said = picks + [pick_gamma], where & (alt.datum.gamma == pick_gamma), said + " + ', gamma ' + datum.gamma"
    base = alt.Chart(data).transform_filter(where)
    tooltip = [alt.Tooltip("threshold:Q", format=".2f"), alt.Tooltip("accepted_per_round:Q", format=".2f"),
               alt.Tooltip("rejected_per_round:Q", format=".2f"), alt.Tooltip("acceptance_rate:Q", format=".1%"),
               alt.Tooltip("tau:Q", format=".2f"), alt.Tooltip("verified_per_round:Q", format=".2f")]
    chosen = alt.condition(_near("threshold", "threshold"), alt.value(1.0), alt.value(0.3))
    bars = base.transform_fold(["accepted", "rejected"], as_=["drafts", "per round"]).mark_bar().encode(
        x=alt.X("threshold:O", title="static threshold on c_k", axis=alt.Axis(format=".2f")),
        y=alt.Y("per round:Q", stack="zero", title="draft tokens per round"),
        color=alt.Color("drafts:N", scale=alt.Scale(domain=["accepted", "rejected"], range=[GREEN, RED]),
                        legend=alt.Legend(orient="top", title=None)),
        order=alt.Order("drafts:N"), opacity=chosen, tooltip=tooltip)
    rate = base.mark_line(point=True, color="black").encode(
        x="threshold:O", y=alt.Y("acceptance_rate:Q", title="share of verified drafts accepted",
                                 scale=alt.Scale(domain=[0, 1])), tooltip=tooltip)
    title = base.transform_filter(_near("threshold", "threshold")).mark_text(align="left", dx=3, fontSize=12).encode(
        x=alt.value(0), y=alt.value(-12),
        text=alt.Text("label:N")).transform_calculate(
        label=f"{said} + ': threshold ' + format(datum.threshold, '.2f') + ', ' + (isValid(datum.acceptance_rate) "
              "? 'acceptance ' + format(datum.acceptance_rate, '.1%') : 'nothing drafted')")
    left = alt.layer(bars, rate, title).resolve_scale(y="independent").properties(width=330, height=220)
    curve = base.mark_line(point=True, color=BLUE).encode(
        x=alt.X("verified_per_round:Q", title="tokens verified per round", scale=alt.Scale(zero=False)),
        y=alt.Y("tau:Q", title="tau (tokens per round)", scale=alt.Scale(zero=False)), tooltip=tooltip)
    point = base.transform_filter(_near("threshold", "threshold")).mark_point(size=160, filled=True, color="black").encode(
        x="verified_per_round:Q", y="tau:Q", tooltip=tooltip)
    label = base.transform_filter(_near("threshold", "threshold")).mark_text(align="left", dx=3, fontSize=12).encode(
        x=alt.value(0), y=alt.value(-12), text="label:N").transform_calculate(
        label="'tau ' + format(datum.tau, '.2f') + ' for ' + format(datum.verified_per_round, '.2f') + ' verified tokens'")
    right = alt.layer(curve, point, label).properties(width=330, height=220)
    return alt.vconcat(left, right).add_params(*picks)  # stacked: each panel at the page's width


def live_kernel() -> bool:
    """Whether a reader's kernel runs this (JupyterLab, Colab, a workstation's Jupyter), so that
    live controls can answer: ipywidgets importable, an IPython kernel, and not the book build's
    headless kernel (ci/kernel_setup.py swaps tqdm's widget bar for its TextBar there, because a
    static page cannot update a widget). DSPARK_LIVE_WIDGETS=1 or 0 overrides the guess."""
    forced = os.environ.get("DSPARK_LIVE_WIDGETS")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        import ipywidgets  # noqa: F401
        import tqdm.auto
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False
    return tqdm.auto.tqdm.__name__ != "TextBar"


class ThresholdExplorer:
    """Live controls for the threshold figure (ipywidgets), recomputed in the kernel from the recorded rounds on
    every move: the static threshold, the confidences (a name of `calibrators`: None for the raw
    head, else a fitted calibrator) and gamma. Each move calls `threshold_state`, keeps its rows
    in `state` and redraws `view` (one row per domain)."""

    def __init__(self, records: Rounds, calibrators: Mapping[str, Any], threshold: float = 0.5,
                 gamma: int | None = None, domain: str | None = None) -> None:
        import ipywidgets as widgets

        self.records, self.calibrators = records.full_blocks(), dict(calibrators)
        if not self.calibrators:
            raise ValueError("calibrators must name at least one set of confidences, e.g. {'raw': None}")
        width = self.records.width
        self.domain = domain
        self.threshold = widgets.FloatSlider(value=float(threshold), min=0.0, max=1.0, step=0.01,
                                             description="threshold", readout_format=".2f")
        self.calibration = widgets.ToggleButtons(options=list(self.calibrators), description="confidences")
        self.gamma = widgets.IntSlider(value=int(gamma or width), min=1, max=width, description="gamma")
        self.view = widgets.HTML()
        for control in (self.threshold, self.calibration, self.gamma):
            control.observe(self._redraw, names="value")
        self.box = widgets.VBox([widgets.HBox([self.threshold, self.gamma]), self.calibration, self.view])
        self.state = pd.DataFrame()
        self.seconds = 0.0  # how long the last recomputation took
        self._redraw()

    def _redraw(self, change: object = None) -> None:
        start = time.perf_counter()
        self.state = threshold_state(self.records, float(self.threshold.value),
                                     self.calibrators[self.calibration.value], int(self.gamma.value))
        self.view.value = self._html()
        self.seconds = time.perf_counter() - start

    def _html(self) -> str:
        rows = []
        for r in self.state.itertuples():
            shown = "nothing drafted" if np.isnan(r.acceptance_rate) else f"{r.acceptance_rate:.1%}"
            bar = "".join(f"<span style='display:inline-block;background:{color};height:0.8em;width:{40 * v:.0f}px'>"
                          "</span>" for color, v in ((GREEN, r.accepted_per_round), (RED, r.rejected_per_round)))
            bold = ("<b>", "</b>") if r.domain == self.domain else ("", "")
            rows.append(f"<tr><td>{bold[0]}{html.escape(str(r.domain))}{bold[1]}</td><td>{r.accepted_per_round:.2f}</td>"
                        f"<td>{r.rejected_per_round:.2f}</td><td>{shown}</td><td>{r.tau:.2f}</td>"
                        f"<td>{r.verified_per_round:.2f}</td><td style='text-align:left'>{bar}</td></tr>")
        head = "".join(f"<th>{h}</th>" for h in ("domain", "accepted / round", "rejected / round", "share accepted",
                                                  "tau", "verified / round", "drafts (green accepted, red rejected)"))
        return (f"<p><b>Threshold {self.threshold.value:.2f} on the {html.escape(str(self.calibration.value))} "
                f"confidences, gamma {self.gamma.value}</b>, computed now from {len(self.records)} recorded "
                f"blocks:</p><table><tr>{head}</tr>{''.join(rows)}</table>")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def show_threshold_explorer(records: Rounds, calibrators: Mapping[str, Any], threshold: float = 0.5,
                            domain: str | None = None) -> ThresholdExplorer | None:
    """The threshold figure's live controls, shown only in a reader's running kernel (`live_kernel`); the
    book build and a headless run get None and show nothing (the precomputed figure stays)."""
    if not live_kernel():
        return None
    from IPython.display import display

    explorer = ThresholdExplorer(records, calibrators, threshold=threshold, domain=domain)
    display(explorer.box)
    return explorer


# ---------------------------------------------------------------------------------------- chapter 02


def gamma_chart(sweep: pd.DataFrame, gamma: int | None = None) -> alt.VConcatChart:
    """The classic drafter's gamma sweep to explore: tau and tokens/s against gamma,
    as measured, with the chosen gamma marked. `sweep`: one row per gamma with "tau" and
    "tokens/s" (the chapter's measurement; nothing is recomputed)."""
    data = sweep.reset_index()[["gamma", "tau", "tokens/s"]].rename(columns={"tokens/s": "tokens_per_s"})
    gammas = data["gamma"].tolist()
    pick = alt.param(name="gamma", value=int(gamma if gamma is not None else gammas[len(gammas) // 2]),
                     bind=alt.binding_select(options=[int(g) for g in gammas], name="gamma "))
    base = alt.Chart(data)
    tooltip = ["gamma:O", alt.Tooltip("tau:Q", format=".2f"), alt.Tooltip("tokens_per_s:Q", format=".1f", title="tokens/s")]

    def panel(field: str, title: str, color: str) -> alt.LayerChart:
        line = base.mark_line(point=True, color=color).encode(
            x=alt.X("gamma:Q", title="gamma (drafted tokens per round)", axis=alt.Axis(tickMinStep=1)),
            y=alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=False)), tooltip=tooltip)
        marked = base.transform_filter(alt.datum.gamma == pick)
        point = marked.mark_point(size=160, filled=True, color="black").encode(x="gamma:Q", y=f"{field}:Q",
                                                                                tooltip=tooltip)
        text = marked.mark_text(align="left", dx=3, fontSize=12).encode(x=alt.value(0), y=alt.value(-12),
                                                                           text="label:N").transform_calculate(
            label=f"'gamma ' + datum.gamma + ': {title} ' + format(datum.{field}, '.2f')")
        return alt.layer(line, point, text).properties(width=300, height=200)

    return alt.vconcat(panel("tau", "tau", BLUE), panel("tokens_per_s", "tokens/s", GREEN)).add_params(pick)


# ---------------------------------------------------------------------------------------- chapter 06b


def load_states(confidences: np.ndarray, concurrencies: Sequence[int], knees: Sequence[int], slopes: Sequence[float],
                max_batch: int, seed: int = 0,
                schedulers: Sequence[str] = ("dspark", "fixed", "mtp1", "threshold")) -> pd.DataFrame:
    """Every state of the load figure: for each R, knee and slope, R blocks drawn
    from `confidences` [N, gamma] (the same blocks for every knee and slope of one R), the
    SYNTHETIC step curve `StepCurve.analytic(max_batch, knee, slope=slope)`, and per scheduler the
    expected throughput Theta of its lengths (`scheduler.expected_throughput`) and its mean budget
    1 + mean l_r; plus, for DSpark, how many requests send each l = 0..gamma (what the bars show)."""
    from ..serving.simulator import resolve_scheduler

    c = np.asarray(confidences, dtype=float)
    gamma = c.shape[1]
    chooser = dict(resolve_scheduler(name) for name in schedulers)
    rng = np.random.default_rng(seed)
    rows = []
    for R in concurrencies:
        blocks = c[rng.integers(0, len(c), size=R)]
        for knee in knees:
            for slope in slopes:
                curve = StepCurve.analytic(max_batch, knee, slope=slope)
                for name, choose in chooser.items():
                    lengths = choose(blocks, curve, blocks)
                    row = {"R": int(R), "knee": int(knee), "slope": float(slope), "scheduler": name,
                           "theta": scheduler.expected_throughput(blocks, lengths, curve),
                           "budget": 1.0 + float(np.mean(lengths))}
                    if name == "dspark":
                        counts = np.bincount(lengths, minlength=gamma + 1)
                        row.update({f"l={l}": int(n) for l, n in enumerate(counts)})
                    rows.append(row)
    return pd.DataFrame(rows)


def load_chart(states: pd.DataFrame) -> alt.VConcatChart:
    """The serving load figure to explore: R, the cost curve's knee and slope. The left panel
    shows how many requests Algorithm 1 gives each draft length l_r at that point; the right one
    every scheduler's expected throughput Theta against R for that knee and slope, the chosen R
    marked."""
    Rs, knees = sorted(states["R"].unique()), sorted(states["knee"].unique())
    slopes = sorted(states["slope"].unique())
    pick_R = alt.param(name="R", value=int(Rs[len(Rs) // 2]), bind=alt.binding_select(options=[int(r) for r in Rs],
                                                                                      name="R (requests) "))
    pick_knee = alt.param(name="knee", value=int(knees[len(knees) // 2]),
                          bind=alt.binding_select(options=[int(k) for k in knees], name="knee "))
    pick_slope = _slider("slope", slopes, slopes[len(slopes) // 2], "slope ")
    shape = f"datum.knee == knee && {_near('slope', 'slope')}"
    at = f"datum.R == R && {shape}"
    lengths = [c for c in states.columns if c.startswith("l=")]
    dspark = states[states["scheduler"] == "dspark"].round({"budget": 3})
    states = states.drop(columns=lengths).round({"theta": 4, "budget": 3})  # one small table each: no nulls
    hist = alt.Chart(dspark).transform_filter(at).transform_fold(lengths, as_=["length", "requests"]).mark_bar(
        color=GREEN).encode(
        x=alt.X("length:N", sort=lengths, title="draft tokens sent, l_r"),
        y=alt.Y("requests:Q", title="requests"), tooltip=["length:N", "requests:Q"])
    hist_title = alt.Chart(dspark).transform_filter(at).mark_text(align="left", fontSize=12).encode(
        x=alt.value(0), y=alt.value(-12), text="label:N").transform_calculate(
        label="'DSpark at R ' + datum.R + ', knee ' + datum.knee + ', slope ' + format(datum.slope, '.2f') "
              "+ ': budget ' + format(datum.budget, '.2f')")
    order = ["dspark", "fixed", "mtp1", "threshold"]
    tooltip = ["scheduler:N", "R:Q", alt.Tooltip("theta:Q", format=".2f"), alt.Tooltip("budget:Q", format=".2f")]
    color = alt.Color("scheduler:N", sort=order, scale=alt.Scale(domain=order, range=[GREEN, "#7570b3", "#d95f02",
                                                                                      "#e7298a"]))
    lines = alt.Chart(states).transform_filter(shape).mark_line(point=True).encode(
        x=alt.X("R:Q", scale=alt.Scale(type="log", base=2), title="R (concurrent requests)"),
        y=alt.Y("theta:Q", title="expected throughput Theta", scale=alt.Scale(type="log")),
        color=color, tooltip=tooltip)
    marked = alt.Chart(states).transform_filter(at).mark_point(size=160, filled=True).encode(
        x="R:Q", y="theta:Q", color=color, tooltip=tooltip)
    rule = alt.Chart(states).transform_filter(at).mark_rule(color="black", strokeDash=[4, 3]).encode(x="R:Q")
    return alt.vconcat(alt.layer(hist, hist_title).properties(width=280, height=200),
                       alt.layer(lines, rule, marked).properties(width=300, height=200)).add_params(
        pick_R, pick_knee, pick_slope)


# ---------------------------------------------------------------------------------------- tooltips


def curves_chart(frame: pd.DataFrame, x: str, y: str, color: str, column: str | None = None,
                 x_title: str | None = None, y_title: str | None = None, diagonal: bool = False,
                 colors: dict[str, str] | None = None) -> alt.Chart:
    """Per-position curves a reader wants to read exactly (acceptance by position, reliability
    diagrams): one line per `color` value, a panel per `column` value (in the order the frame first
    lists them), every point with a hover tooltip of its row. `diagonal` adds y = x (perfect
    calibration)."""
    scale = alt.Scale(domain=list(colors), range=list(colors.values())) if colors else alt.Undefined
    tooltip = [alt.Tooltip(c, format=".3f") if pd.api.types.is_float_dtype(frame[c]) else c for c in frame.columns]
    lines = alt.Chart().mark_line(point=alt.OverlayMarkDef(size=50)).encode(
        x=alt.X(f"{x}:Q", title=x_title or x, axis=alt.Axis(tickMinStep=1) if frame[x].dtype.kind in "iu" else alt.Undefined),
        y=alt.Y(f"{y}:Q", title=y_title or y, scale=alt.Scale(domain=[0, 1])),
        color=alt.Color(f"{color}:N", scale=scale, title=None, legend=alt.Legend(orient="bottom")), tooltip=tooltip)
    layers = [lines]
    if diagonal:
        layers.insert(0, alt.Chart().mark_rule(strokeDash=[3, 3], color=GREY).encode(
            x=alt.datum(0.0), y=alt.datum(0.0), x2=alt.datum(1.0), y2=alt.datum(1.0)))
    chart = alt.layer(*layers, data=frame).properties(width=270 if column else 400, height=200)
    if column is None:
        return chart
    # two panels a row fit the page column (about 700 px); a panel title splits into lines at "; "
    header = alt.Header(labelExpr="split(datum.value, '; ')", labelFontSize=12)
    return chart.facet(facet=alt.Facet(f"{column}:N", title=None, sort=list(pd.unique(frame[column])), header=header),
                       columns=2)
