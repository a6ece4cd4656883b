"""Declared capabilities at registration: validated with errors naming the dimension, and an
input outside them declined with a reason derived from the declaration, before ``accepts``."""

from __future__ import annotations

import warnings

import pytest
import torch
from registry_helpers import tag_of
from registry_helpers import tagged as tagged_in

from libreyolo.kernels import (
    Capabilities,
    KernelDisabledWarning,
    decline_reason,
    dispatch,
    explain,
    register,
    registered,
)
from libreyolo.kernels.capabilities import layout_of

WITH_REF = "fake_quant_int8_per_channel"
UNPACK = "unpack_mxfp8"  # its dtype is the output dtype argument, not an input tensor's

pytestmark = pytest.mark.usefixtures("clean_registry")


def tagged(tag):
    return tagged_in(tag, WITH_REF)


def inputs(dtype=torch.float32, device="cpu"):
    return torch.ones(4, 6, dtype=dtype, device=device), torch.ones(4, device=device)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"modes": {"gpu"}}, ValueError, "modes: unknown mode 'gpu'"),
    ({"layouts": {"strided"}}, ValueError, "layouts: unknown layout 'strided'"),
    ({"devices": {"gpu"}}, ValueError, "devices: 'gpu' is not a torch device type"),
    ({"devices": {"cuda:0"}}, ValueError, "devices: 'cuda:0' is not a torch device type"),
    ({"dtypes": {"float32"}}, TypeError, "dtypes: expected torch.dtype values, got 'float32'"),
    ({"modes": "cpu"}, TypeError, "modes: expected an iterable"),
    ({"dtypes": torch.float32}, TypeError, "dtypes: expected an iterable"),
    ({"dtypes": ()}, ValueError, "dtypes: an empty declaration would decline every input"),
    ({"devices": {"cpu"}, "modes": {"cuda-graph"}}, ValueError,
     "modes: 'cuda-graph' runs on cuda tensors, which the declared devices"),
])
def test_a_bad_declaration_is_an_error_naming_the_dimension(kwargs, error, message):
    with pytest.raises(error, match=message):
        Capabilities(**kwargs)


def test_register_takes_only_a_capabilities_value():
    with pytest.raises(TypeError, match="capabilities: expected libreyolo.kernels.Capabilities"):
        register(WITH_REF, tagged("x"), name="x", capabilities={"dtypes": [torch.float32]})


def test_a_declaration_is_data_a_reader_can_print():
    declared = Capabilities(dtypes=[torch.bfloat16, torch.float32], modes=("cuda", "cpu"))
    assert declared.as_dict() == {"devices": None, "dtypes": ["bfloat16", "float32"],
                                  "modes": ["cpu", "cuda"], "layouts": None}
    assert str(declared) == "dtypes bfloat16, float32; modes cpu, cuda"
    assert declared == Capabilities(dtypes={torch.float32, torch.bfloat16},
                                    modes={"cpu", "cuda"})
    assert registered(WITH_REF)[-1].capabilities is None  # the reference declares nothing


@pytest.mark.parametrize("capabilities, call, reason", [
    (Capabilities(dtypes={torch.float32}), inputs(torch.float16),
     "dtype float16 not in declared dtypes float32"),
    (Capabilities(devices={"cuda"}), inputs(), "device cpu not in declared devices cuda"),
    (Capabilities(modes={"cuda", "cuda-graph"}), inputs(),
     "mode cpu not in declared modes cuda, cuda-graph"),
    (Capabilities(layouts={"contiguous"}), (inputs()[0].t(), torch.ones(6)),
     "layout transposed not in declared layouts contiguous"),
    (Capabilities(layouts={"contiguous", "transposed"}), (inputs()[0][:, ::2], torch.ones(4)),
     "layout gapped not in declared layouts contiguous, transposed"),
])
def test_an_input_outside_the_declaration_goes_to_the_next_with_the_declarations_reason(
        capabilities, call, reason):
    register(WITH_REF, tagged("declared"), name="declared", capabilities=capabilities)
    expected = f"declared unsupported ({reason})"
    assert decline_reason(WITH_REF, "declared", *call) == expected
    assert dict((i.name, r) for i, r in explain(WITH_REF, *call))["declared"] == expected
    assert dispatch(WITH_REF, *call) is not None and tag_of(dispatch(WITH_REF, *call)) is None


def test_an_input_inside_the_declaration_runs_it():
    register(WITH_REF, tagged("declared"), name="declared", capabilities=Capabilities(
        devices={"cpu"}, dtypes={torch.float32}, modes={"cpu"}, layouts={"contiguous"}))
    assert tag_of(dispatch(WITH_REF, *inputs())) == "declared"


def test_the_declaration_declines_before_accepts_is_asked():
    asked = []
    register(WITH_REF, tagged("declared"), name="declared",
             capabilities=Capabilities(dtypes={torch.float32}),
             accepts=lambda *args, **kwargs: asked.append(args))
    dispatch(WITH_REF, *inputs(torch.bfloat16))
    assert asked == []
    assert tag_of(dispatch(WITH_REF, *inputs())) == "declared" and len(asked) == 1


def test_a_declared_decline_is_not_a_failure():
    register(WITH_REF, tagged("declared"), name="declared",
             capabilities=Capabilities(dtypes={torch.float32}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDisabledWarning)
        dispatch(WITH_REF, *inputs(torch.float16))
    assert tag_of(dispatch(WITH_REF, *inputs())) == "declared"


def test_the_dtype_of_an_unpack_call_is_its_output_dtype_argument():
    register(UNPACK, tagged("declared"), name="declared",
             capabilities=Capabilities(dtypes={torch.float16}))
    codes = torch.zeros(2, 32, dtype=torch.uint8).view(torch.float8_e4m3fn)
    scale = torch.full((2, 1), 127, dtype=torch.uint8)
    assert decline_reason(UNPACK, "declared", codes, scale, dtype=torch.float16) is None
    assert decline_reason(UNPACK, "declared", codes, scale, torch.float16) is None
    assert decline_reason(UNPACK, "declared", codes, scale) == (  # the reference's default
        "declared unsupported (dtype float32 not in declared dtypes float16)")


def test_the_interpreter_is_a_mode_of_its_own(monkeypatch):
    register(WITH_REF, tagged("declared"), name="declared",
             capabilities=Capabilities(modes={"cpu"}))
    assert decline_reason(WITH_REF, "declared", *inputs()) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert decline_reason(WITH_REF, "declared", *inputs()) == (
        "declared unsupported (mode interpreter not in declared modes cpu)")


def test_layouts_are_the_suites():
    x = torch.randn(3, 4, 5)
    assert layout_of(x) == layout_of(x[:1]) == layout_of(torch.ones(())) == "contiguous"
    assert layout_of(x.permute(2, 1, 0)) == "transposed"
    assert layout_of(torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)) == \
        "transposed"
    assert layout_of(x[..., ::2]) == layout_of(x[:, :, :3]) == "gapped"
    assert layout_of(torch.randn(4).expand(3, 4)) == "gapped"  # repeats elements


def test_a_declaration_costs_nothing_where_nothing_is_restricted():
    register(WITH_REF, tagged("open"), name="open", capabilities=Capabilities())
    assert tag_of(dispatch(WITH_REF, *inputs(torch.bfloat16))) == "open"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_under_a_real_cuda_graph_capture_a_backend_declaring_no_capture_is_declined():
    """Its host read would break the capture; declared, the registry never calls it there."""
    def reads_on_host(x, scale, axis=0):
        if not bool((scale >= 0).all()):
            raise ValueError("scale must be non-negative")
        return x * 2

    register(WITH_REF, lambda x, scale, axis=0: x * 3, name="capturable")  # graph-safe, older
    register(WITH_REF, reads_on_host, name="no-capture",
             capabilities=Capabilities(modes={"cpu", "cuda"}))
    x, scale = inputs(device="cuda")
    assert torch.equal(dispatch(WITH_REF, x, scale), x * 2)  # eager: it runs
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dispatch(WITH_REF, x, scale)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x * 3)
