"""Running a check and judging it: the cells of the matrix and their plan (``cells``, ``plan``),
how a result is held to its contract (``contracts``, ``ms_deform_attn_parity``,
``determinism``, ``disabled``), the results' form and tables (``matrix``), the pytest outcome
(``outcomes``), a child pytest (``child``) and a recorded cell replayed (``replay``). The pytest
plugin that drives them is ``conformance/plugin.py``."""
