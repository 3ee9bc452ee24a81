"""Interactive figures that survive a download: every Altair chart of an executed notebook draws
offline in any notebook viewer, and the rendered book keeps its live controls.

In the build's kernel (ci/kernel_setup.py calls `enable`) a chart's output is one mimebundle that
loads no script:
- the Vega-Lite spec (`VEGALITE_MIME`), which JupyterLab draws as the live chart where it knows
  Vega-Lite 6;
- a PNG of the chart as it first shows (vl-convert, drawn at `PNG_SCALE` pixels per CSS pixel and
  shown at the chart's own size): what nbconvert's HTML, a static viewer, VS Code, Colab and a
  JupyterLab without Vega-Lite 6 show;
- one line of text/plain.

Only the copy Jupyter Book renders shows, in their place, the HTML that draws the spec with Vega,
Vega-Lite and vega-embed from the book's own `_static/vega/` (vendored by ci/vendor_widgets.sh, no
CDN): ci/build_book.py calls `for_the_page` on it, so the page keeps its sliders. The executed notebooks and the copies behind the book's download button
(`_build/html/_sources/`, which ci/build_book.py writes from the offline copy) never name
`_static/vega`: `offline_problems` and `download_problems` say where one does.
"""
from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path
from typing import Any

import altair as alt

REPO = Path(__file__).resolve().parents[1]
_VEGALITE = alt.SCHEMA_VERSION.lstrip("v")  # "6.4.1": the Vega-Lite Altair writes
VEGALITE_MIME = f"application/vnd.vegalite.v{_VEGALITE.split('.')[0]}+json"
VL_CONVERT_VERSION = ".".join(_VEGALITE.split(".")[:2])  # vl-convert names its bundled Vega-Lites "6.4"
STATIC = "_static/vega"  # where the built site serves the vendored scripts; nowhere else has them
PAGE_BASE_URL = f"../{STATIC}"  # from a chapter page (chapters/NAME.html)
EMBED_OPTIONS = {"renderer": "svg", "actions": False}
PNG_SCALE = 2
RENDERER = "dspark-offline"
STATIC_IMAGES = ("image/png", "image/svg+xml")
TEXT = "<An interactive figure (Vega-Lite): JupyterLab draws it live, other viewers show its PNG>"


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _xml_safe(value: Any) -> Any:
    """`value` (a spec, or any part of it) with every character XML forbids replaced by U+FFFD:
    vl-convert draws text through SVG and aborts the whole process on one (a control character a
    random model's token decodes to, say)."""
    if isinstance(value, str):
        return _NOT_XML.sub("\ufffd", value)
    if isinstance(value, dict):
        return {key: _xml_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_xml_safe(item) for item in value]
    return value


def static_png(spec: dict[str, Any]) -> tuple[str, dict[str, int]] | None:
    """The chart as it first shows, as a base64 PNG drawn by vl-convert at `PNG_SCALE`, with the
    size to show it at ({"width", "height"} in CSS pixels); None where vl-convert is not installed."""
    try:
        import vl_convert
    except ImportError:
        return None
    png = vl_convert.vegalite_to_png(_xml_safe(spec), vl_version=VL_CONVERT_VERSION, scale=PNG_SCALE)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    return base64.b64encode(png).decode("ascii"), {"width": round(width / PNG_SCALE), "height": round(height / PNG_SCALE)}


def offline_bundle(spec: dict[str, Any], **_options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """An Altair renderer: (mimebundle, metadata) with the Vega-Lite spec, its PNG and a line of text."""
    bundle: dict[str, Any] = {VEGALITE_MIME: spec, "text/plain": TEXT}
    metadata: dict[str, Any] = {}
    image = static_png(spec)
    if image is not None:
        bundle["image/png"], metadata["image/png"] = image
    return bundle, metadata


def enable() -> None:
    """Show every Altair chart of this process as `offline_bundle` (the build's kernel)."""
    alt.renderers.register(RENDERER, offline_bundle)
    alt.renderers.enable(RENDERER)


def vendored_versions(root: Path = REPO) -> dict[str, str]:
    """{library: version} of the scripts in ROOT/_vendor/vega/ (named <library>@<version>)."""
    folder = Path(root) / "_vendor" / "vega"
    return dict(f.name.split("@", 1) for f in folder.glob("*@*")) if folder.is_dir() else {}


def page_html(spec: dict[str, Any], output_div: str, versions: dict[str, str]) -> str:
    """The HTML that draws `spec` on a chapter page of the built site, in SVG, with the vendored
    scripts of `versions` (`vendored_versions`) from `PAGE_BASE_URL`."""
    from altair.utils.mimebundle import spec_to_mimebundle

    return spec_to_mimebundle(spec, format="html", mode="vega-lite", vega_version=versions["vega"],
                              vegalite_version=versions["vega-lite"], vegaembed_version=versions["vega-embed"],
                              embed_options=EMBED_OPTIONS, base_url=PAGE_BASE_URL, template="universal",
                              output_div=output_div)["text/html"]


def _vega_outputs(nb: dict[str, Any]):
    """(cell index, cell, output index, output) of every output of a notebook (raw JSON)."""
    for i, cell in enumerate(nb.get("cells", [])):
        for k, out in enumerate(cell.get("outputs", []) if cell.get("cell_type") == "code" else []):
            yield i, cell, k, out


def _is_vegalite(mime: str) -> bool:
    return mime.startswith("application/vnd.vegalite.")


def for_the_page(nb: dict[str, Any], versions: dict[str, str]) -> int:
    """Show each Vega-Lite output of `nb` (raw JSON, changed in place) as the HTML that draws it on
    the built page (`page_html`, an element id from the cell's id) and its line of text; return how
    many. Only for the copy Jupyter Book renders: the notebook it changes no longer draws outside the
    site. The spec and the PNG leave that copy (myst-nb renders every type of an output, and warns
    on the Vega-Lite one; the page draws the chart, not its PNG)."""
    changed = 0
    for i, cell, k, out in _vega_outputs(nb):
        data = out.get("data", {})
        if VEGALITE_MIME in data:
            html = page_html(data[VEGALITE_MIME], f"vega-{cell.get('id', i)}-{k}", versions)
            out["data"] = {"text/html": html, "text/plain": data.get("text/plain", TEXT)}
            out["metadata"] = {}
            changed += 1
    return changed


def offline_problems(nb: dict[str, Any], name: str) -> list[str]:
    """Where an executed notebook (raw JSON) has a figure that a viewer outside the built site
    cannot draw: an output that loads from `_static/vega`, an Altair chart drawn by a script
    (Altair's html renderer: a CDN or a folder the viewer lacks), a Vega-Lite output without a
    static image beside it."""
    problems = []
    for i, cell, _, out in _vega_outputs(nb):
        data = out.get("data", {})
        where = f"{name}: cell {i} (id {cell.get('id', '?')})"
        html = "".join(data.get("text/html", ""))
        if STATIC in json.dumps(out):
            problems.append(f"{where} loads Vega from {PAGE_BASE_URL}, which only the built site has: a notebook "
                            "viewer shows 'Error loading script' (run it with ci/kernel_setup.py's renderer)")
        elif "vegaEmbed(" in html and not any(_is_vegalite(m) for m in data):
            problems.append(f"{where} draws an Altair chart with a script only (Altair's html renderer): offline it "
                            "draws nothing")
        if any(_is_vegalite(m) for m in data) and not any(m in data for m in STATIC_IMAGES):
            problems.append(f"{where} has an interactive figure without a static image beside it (is "
                            "vl-convert-python installed?)")
    return problems


def download_problems(html_dir: Path) -> list[str]:
    """`offline_problems` of every notebook a built site offers for download (its _sources copies)."""
    html_dir = Path(html_dir)
    problems = []
    for path in sorted(html_dir.rglob("*.ipynb")):
        rel = path.relative_to(html_dir).as_posix()
        problems += offline_problems(json.loads(path.read_text(encoding="utf-8")), f"{rel} (download copy)")
    return problems
