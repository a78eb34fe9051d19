"""An invoice document as a PDF: the view model (:mod:`.invoice_view`) laid out line by line
with fpdf2's text primitives (each string placed at its position, amounts right-aligned by their
measured width), which costs about a millisecond a page.

fpdf2 is pure Python (no system libraries). Its built-in Helvetica covers Latin-1 only, so a
character outside it (a name in another script) is shown as ``?`` rather than failing the
document. Text is placed as text, never read as markup.
"""

from __future__ import annotations

from fpdf import FPDF

from billing_core.documents.invoice_view import InvoiceDocument, Party

_FONT = "helvetica"
_LEFT, _RIGHT, _BOTTOM = 15.0, 195.0, 280.0
_WIDTH = _RIGHT - _LEFT
# Right edges of the line table's columns: quantity, unit price, amount (description: the rest).
_QTY, _UNIT, _AMOUNT = _LEFT + 0.66 * _WIDTH, _LEFT + 0.83 * _WIDTH, _RIGHT
_TOTAL_LABEL = _LEFT + 0.7 * _WIDTH
_DOT = " \u00b7 "


def _latin1(text: str) -> str:
    return text.encode("latin-1", "replace").decode("latin-1")


class _Page:
    """Writes lines down the document, starting a new page at the bottom margin."""

    def __init__(self, pdf: FPDF) -> None:
        self.pdf = pdf
        self.y = 20.0

    def down(self, mm: float) -> None:
        self.y += mm
        if self.y > _BOTTOM:
            self.pdf.add_page()
            self.y = 20.0

    def font(self, *, bold: bool = False, size: float = 10) -> None:
        self.pdf.set_font(_FONT, "B" if bold else "", size)

    def left(self, text: str, x: float = _LEFT) -> None:
        self.pdf.text(x, self.y, _latin1(text))

    def right(self, text: str, x: float) -> None:
        text = _latin1(text)
        self.pdf.text(x - self.pdf.get_string_width(text), self.y, text)

    def wrapped(self, text: str, width: float) -> list[str]:
        """``text`` in lines no wider than ``width`` (a word longer than that stays whole)."""
        lines: list[str] = []
        line = ""
        for word in _latin1(text).split(" "):
            candidate = f"{line} {word}" if line else word
            if line and self.pdf.get_string_width(candidate) > width:
                lines.append(line)
                line = word
            else:
                line = candidate
        return [*lines, line]

    def rule(self) -> None:
        self.pdf.line(_LEFT, self.y + 1.5, _RIGHT, self.y + 1.5)


def _party(page: _Page, heading: str, party: Party) -> None:
    page.down(10)
    page.font(bold=True, size=12)
    page.left(heading)
    page.down(6)
    page.font(bold=True)
    page.left(party.name)
    page.font()
    for detail in party.details:
        page.down(5)
        page.left(detail)


def _lines(page: _Page, document: InvoiceDocument) -> None:
    page.down(10)
    page.font(bold=True)
    page.left("Description")
    page.right("Qty", _QTY)
    page.right("Unit price", _UNIT)
    page.right("Amount", _AMOUNT)
    page.rule()
    page.font()
    description_width = _QTY - _LEFT - 15
    for line in document.lines:
        page.down(6)
        unit = line.unit_amount if line.unit_amount is not None else line.amount
        first, *more = page.wrapped(line.description, description_width)
        page.left(first)
        page.right(str(line.quantity), _QTY)
        page.right(document.money(unit), _UNIT)
        page.right(document.money(line.amount), _AMOUNT)
        for rest in more:
            page.down(5)
            page.left(rest)


def _totals(page: _Page, document: InvoiceDocument) -> None:
    page.down(4)
    page.rule()
    rows = [("Subtotal", document.subtotal)]
    rows += [(tax.description, tax.amount) for tax in document.taxes]
    rows.append(("Total", document.total))
    for n, (label, amount) in enumerate(rows):
        page.down(6)
        page.font(bold=n == len(rows) - 1)
        page.right(label, _TOTAL_LABEL)
        page.right(document.money(amount), _AMOUNT)


def render(document: InvoiceDocument) -> bytes:
    """The document as PDF bytes (one A4 page for a short invoice)."""
    pdf = FPDF(format="A4")
    pdf.set_title(_latin1(document.title))
    pdf.set_author(_latin1(document.seller.name))
    pdf.set_creation_date(document.issued_at)
    pdf.set_line_width(0.2)
    pdf.add_page()
    page = _Page(pdf)
    page.font(bold=True, size=18)
    page.left(document.title)
    page.down(9)
    page.font()
    facts = [f"Issued {document.issued_at:%Y-%m-%d} (UTC)"]
    if document.number:
        facts.append(f"Invoice id {document.invoice_id}")
    facts.append(f"Status: {document.status}")
    if document.paid_at:
        facts.append(f"Paid {document.paid_at:%Y-%m-%d %H:%M} UTC")
    page.left(_DOT.join(facts))
    _party(page, "Seller", document.seller)
    _party(page, "Bill to", document.customer)
    page.down(10)
    page.left(
        f"Billing period: {document.period_start:%Y-%m-%d %H:%M} to "
        f"{document.period_end:%Y-%m-%d %H:%M} UTC"
    )
    _lines(page, document)
    _totals(page, document)
    page.font()
    for note in document.notes:
        page.down(8)
        for text in page.wrapped(note, _WIDTH):
            page.left(text)
            page.down(5)
    return bytes(pdf.output())
