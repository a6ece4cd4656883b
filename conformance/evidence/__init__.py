"""Parity records and the gate that requires them: a record's provenance and digest
(``provenance``), writing and reading records (``recorder``, ``records``, ``rederive``), the scan
of in-tree implementations that the recorder and the gate share (``scan``), the gate itself
(``gate``, with the declared GPU stack ``stack`` and the Hub pins ``hub_pins``, ``hub_cache``),
the plain GPU run's evidence (``plain_run``) and the command that brings them up to date
(``rerecord``)."""
