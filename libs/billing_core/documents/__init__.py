"""Customer documents: the invoice's view model (:mod:`.invoice_view`) and its PDF
(:mod:`.invoice_pdf`, rendered from an HTML template)."""
