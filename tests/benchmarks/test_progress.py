"""A benchmark that runs for minutes prints where it is: one line per row on stderr."""

from benchmarks.bench.progress import each


def test_each_yields_every_item_and_announces_it_first(capsys):
    seen = []
    for item in each(["a", "b"], lambda x: f"row {x}"):
        seen.append((item, capsys.readouterr().err))
    assert [item for item, _ in seen] == ["a", "b"]
    assert seen[0][1].startswith("[1/2, ") and seen[0][1].endswith("] row a\n")
    assert seen[1][1].startswith("[2/2, ") and seen[1][1].endswith("] row b\n")
