"""The digits example as docs/quantization.md shows it (issue 50): its table is what the script
prints from the recorded run, rounded and worded as documented; the page's setup line installs
the ``examples`` extra; training prints a line per epoch instead of minutes of silence."""

from __future__ import annotations

import json
import re

import torch
from doc_paths import ROOT

from examples import digits_qat

SECTION = (ROOT / "docs" / "quantization.md").read_text().split(
    "### A real small task: scikit-learn's digits", 1)[1].split("\n## ", 1)[0]


def test_the_page_shows_the_table_the_script_prints_from_the_run_it_cites():
    (cited,) = re.findall(r"`benchmarks/results/(digits_qat_cpu_[\d-]+\.json)`", SECTION)
    results = json.loads((ROOT / "benchmarks" / "results" / cited).read_text())
    assert digits_qat.table(results) in SECTION


def test_the_page_s_command_installs_the_examples_extra_then_runs_the_example():
    block = SECTION.split("```bash\n", 1)[1].split("```", 1)[0]
    assert ("python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e '.[examples]' "
            "&& .venv/bin/python examples/digits_qat.py") in block


def test_training_prints_one_line_per_epoch(capsys):
    torch.manual_seed(0)
    x, y = torch.rand(8, 1, 8, 8), torch.arange(8) % 10
    digits_qat.train(digits_qat.DigitsNet(), x, y, epochs=2, lr=1e-3, seed=0, label="float")
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"[\d.]+ s\)$", "N s)", re.sub(r"loss [\d.]+", "loss L", line))
            for line in lines] == ["float epoch 1/2: loss L (N s)", "float epoch 2/2: loss L (N s)"]
