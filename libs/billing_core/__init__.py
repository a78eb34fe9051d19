"""billing_core: the rules, storage and plumbing shared by every billing process."""
