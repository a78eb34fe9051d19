"""Units of work shared by several processes; the caller owns the transaction."""
