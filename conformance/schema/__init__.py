"""What the suite checks, as types: a slot's profile (``spec``: inputs, contract, expectations),
the bounded contract's formula (``bounds``) and what implementations declare as the suite reads
it (``declarations``). Imports nothing else of the suite."""
