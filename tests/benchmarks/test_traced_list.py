"""The traced list grows only from passing tests: an implementation is listed when its traced test
and its inductor-compiled test passed and, where its slot has a reduce-overhead test, that test
passed too."""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ElementTree

from benchmarks.rendering import traced_list

TRACED = "test_a_compiled_call_is_traced_to_the_kernel_eager_selects"
COMPILED = "test_inductor_compiles_the_traced_implementation_to_the_eager_bits"
REPLAY = traced_list.REPLAY_TEST

JUNIT = f"""<testsuites><testsuite>
<testcase name="{TRACED}[ms_deform_attn]"><properties>
  <property name="traced" value="ms_deform_attn/triton"/></properties></testcase>
<testcase name="{TRACED}[fake_quant_fp8]"><properties>
  <property name="traced" value="fake_quant_fp8/triton"/></properties></testcase>
<testcase name="{TRACED}[fake_quant_int8]"><properties>
  <property name="traced" value="fake_quant_int8/triton"/></properties><failure/></testcase>
<testcase name="{TRACED}[unpack_int4]"><skipped/></testcase>
<testcase name="{TRACED}[fp8_gemm]"><properties>
  <property name="traced" value="fp8_gemm/triton"/></properties></testcase>
<testcase name="{TRACED}[fp8_cast_static]"><properties>
  <property name="traced" value="fp8_cast_static/triton"/></properties></testcase>
<testcase name="{COMPILED}[ms_deform_attn]"><properties>
  <property name="compiled" value="ms_deform_attn/triton"/></properties></testcase>
<testcase name="{COMPILED}[fake_quant_fp8]"><properties>
  <property name="compiled" value="fake_quant_fp8/triton"/></properties></testcase>
<testcase name="{COMPILED}[fp8_gemm]"><properties>
  <property name="compiled" value="fp8_gemm/triton"/></properties></testcase>
<testcase name="{COMPILED}[fp8_cast_static]"><properties>
  <property name="compiled" value="fp8_cast_static/triton"/></properties><failure/></testcase>
<testcase name="{REPLAY}[ms_deform_attn]"><properties>
  <property name="replayed" value="ms_deform_attn"/></properties></testcase>
<testcase name="{REPLAY}[fake_quant_fp8]"><failure/></testcase>
</testsuite></testsuites>"""


def test_only_implementations_traced_compiled_and_replayed_are_listed():
    entries = traced_list.validated(ElementTree.fromstring(JUNIT))
    assert entries == ["fp8_gemm/triton", "ms_deform_attn/triton"]


def test_the_rendered_list_is_what_traced_reads():
    text = traced_list.render(["fp8_gemm/triton"], "H100, torch 2.11")
    assert tomllib.loads(text)["traced"] == [
        {"implementation": "fp8_gemm/triton", "run": "H100, torch 2.11"}]
    assert tomllib.loads(traced_list.render([], "x"))["traced"] == []
