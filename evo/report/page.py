"""The report as one self-contained HTML page: Plotly's bundle, the figures, the lineage
graph and every node's details inlined, so the file opens without a network.

The page template, its script and its style live in ``templates/report/`` (shipped with evo
like the kernel families). Data goes in as JSON inside ``<script type="application/json">``
blocks, written so that nothing in them can end them early; the page's script renders the
figures with Plotly, wires node selection, and writes a summary of what it drew (traces,
points and SVG marks per plot, lineage nodes, errors seen) into ``#evo-report-summary``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jinja2
from markupsafe import Markup

from evo import paths
from evo.errors import EvoError
from evo.vocab import value_text

TEMPLATE = "report.html.j2"


def template_dir() -> Any:
    return paths.root() / "templates" / "report"


def script_json(doc: Any) -> Markup:
    """JSON safe inside a ``<script>`` element: every ``<`` is written ``\\u003c``, so no text from
    the database (a label, a reason, a source line) can close the element or open a comment."""
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    return Markup(text.replace("<", "\\u003c"))


def inline_code(text: str, what: str) -> Markup:
    """JavaScript or CSS to inline verbatim; refused if it could end its element early."""
    if "</script" in text.lower() or "</style" in text.lower():
        raise EvoError(f"{what} contains a closing tag and cannot be inlined")
    return Markup(text)


def render_page(context: Mapping[str, Any], figures: Mapping[str, Any], graph: Mapping[str, Any]) -> str:
    """The HTML page from the template, the report's data, its figures and the lineage graph."""
    try:  # imported here: every other evo command works without plotly (e.g. on a bare GPU host)
        from plotly.offline import get_plotlyjs, get_plotlyjs_version
    except ImportError:
        raise EvoError("evo report needs plotly (pip install 'plotly>=6,<8')") from None
    folder = template_dir()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["v"] = value_text
    try:
        template = env.get_template(TEMPLATE)
        script = (folder / "report.js").read_text()
        style = (folder / "report.css").read_text()
    except (OSError, jinja2.TemplateNotFound) as exc:
        raise EvoError(f"the report template is missing from {folder}: {exc}") from None
    return template.render(
        **context,
        figure_ids=[k for k, v in figures.items() if v is not None],
        plotly_js=inline_code(get_plotlyjs(), "plotly.js"),
        plotly_version=get_plotlyjs_version(),
        report_js=inline_code(script, "report.js"),
        report_css=inline_code(style, "report.css"),
        figures_json=script_json({k: v for k, v in figures.items() if v is not None}),
        graph_json=script_json(graph),
    )
