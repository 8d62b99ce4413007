"""Parameter values: :mod:`.resolve` (value + origin of every parameter) and :mod:`.rules` (the cross-checks
against the engine and the tokenizer)."""
