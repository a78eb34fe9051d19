"""An invoice document as a PDF: the view model (:mod:`.invoice_view`) through an HTML template
(``templates/invoice.html``, Jinja2 with autoescaping) into fpdf2's HTML renderer.

fpdf2 is pure Python (no system libraries). Its built-in Helvetica covers Latin-1 only, so a
character outside it (a name in another script) is shown as ``?`` rather than failing the
document.
"""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF
from jinja2 import Environment, FileSystemLoader, select_autoescape

from billing_core.documents.invoice_view import InvoiceDocument

_TEMPLATES = Path(__file__).parent / "templates"
_ENV = Environment(
    loader=FileSystemLoader(_TEMPLATES),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_FONT = "helvetica"


def html(document: InvoiceDocument) -> str:
    """The document's HTML (what the PDF is rendered from)."""
    return _ENV.get_template("invoice.html").render(doc=document)


def _latin1(text: str) -> str:
    return text.encode("latin-1", "replace").decode("latin-1")


def render(document: InvoiceDocument) -> bytes:
    """The document as PDF bytes (one A4 page for a short invoice)."""
    pdf = FPDF(format="A4")
    pdf.set_title(_latin1(document.title))
    pdf.set_author(_latin1(document.seller.name))
    pdf.set_creation_date(document.issued_at)
    pdf.set_font(_FONT, size=10)
    pdf.add_page()
    pdf.write_html(_latin1(html(document)), font_family=_FONT)
    return bytes(pdf.output())
