"""The collector: charges open invoices at the gateway's rate, never twice, with dunning."""
