"""Root conftest: its presence puts the repository root on ``sys.path`` (pytest's rootdir
conftest rule), so ``conformance`` and ``examples`` import as packages from any test directory,
with or without an installed ``libreyolo``. The conformance suite's options (``--gpu``,
``--impl``, ``--record``, ``--interpreter``, ``--matrix``, ``--profile``) come from
``conformance/conftest.py``; ``testpaths`` in pyproject.toml makes them valid from the root too.
"""
