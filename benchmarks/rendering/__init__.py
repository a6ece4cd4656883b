"""The tables of ``docs/performance.md`` and the README's status table, rendered from the results
files they cite, so a number on a page is a number of a committed run
(``tests/docs/test_performance_tables.py`` re-renders the pages and fails when they differ).

    python -m benchmarks.rendering            # rewrite the tables (docs/performance.md, README)
    python -m benchmarks.rendering --check    # exit 1 if any table differs from its files

One module a job: ``results`` reads the files and their index (``benchmarks/results/README.md``:
commit and date; the hardware comes from the files), ``floors`` computes each shape's floor over
the H200's ceilings, ``formatting`` writes the numbers, ``quant_tables``, ``attention_tables``
and ``host_tables`` make each area's table, ``status`` the README's, and ``pages`` puts them
between their markers. Pure Python: no torch, no GPU.
"""
