"""Customer documents: the invoice's view model (:mod:`.invoice_view`) and its PDF
(:mod:`.invoice_pdf`, laid out with fpdf2's text primitives)."""
