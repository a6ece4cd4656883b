"""The traced list grows only from passing tests: an implementation is listed when its traced test,
its inductor-compiled test and its same-code check passed and, where its slot has a
reduce-overhead test, that test passed too."""

from __future__ import annotations

import tomllib
import xml.etree.ElementTree as ElementTree

from benchmarks.rendering import traced_list

TRACED = "test_a_compiled_call_is_traced_to_the_kernel_eager_selects"
COMPILED = "test_inductor_compiles_the_traced_implementation_to_the_eager_bits"
SAME_CODE = "test_a_traced_kernel_compiles_to_the_code_its_eager_launch_runs"
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
<testcase name="{TRACED}[ms_deform_attn_ragged]"><properties>
  <property name="traced" value="ms_deform_attn_ragged/triton"/></properties></testcase>
<testcase name="{COMPILED}[ms_deform_attn_ragged]"><properties>
  <property name="compiled" value="ms_deform_attn_ragged/triton"/></properties></testcase>
<testcase name="{SAME_CODE}[ms_deform_attn/triton]"><properties>
  <property name="same_code" value="ms_deform_attn/triton"/></properties></testcase>
<testcase name="{SAME_CODE}[fp8_gemm/triton]"><properties>
  <property name="same_code" value="fp8_gemm/triton"/></properties></testcase>
<testcase name="{SAME_CODE}[fake_quant_fp8/triton]"><properties>
  <property name="same_code" value="fake_quant_fp8/triton"/></properties></testcase>
<testcase name="{SAME_CODE}[ms_deform_attn_ragged/triton]"><skipped/></testcase>
<testcase name="{REPLAY}[ms_deform_attn_ragged]"><properties>
  <property name="replayed" value="ms_deform_attn_ragged"/></properties></testcase>
<testcase name="{REPLAY}[ms_deform_attn]"><properties>
  <property name="replayed" value="ms_deform_attn"/></properties></testcase>
<testcase name="{REPLAY}[fake_quant_fp8]"><failure/></testcase>
</testsuite></testsuites>"""


def test_only_implementations_traced_compiled_same_code_and_replayed_are_listed():
    entries = traced_list.validated(ElementTree.fromstring(JUNIT))
    assert entries == ["fp8_gemm/triton", "ms_deform_attn/triton"]


def test_the_junit_files_of_one_run_are_read_together(tmp_path, capsys):
    cases = ElementTree.fromstring(JUNIT).find("testsuite")
    same_code = [case for case in cases if case.get("name").startswith(SAME_CODE)]
    files = [tmp_path / "same_code.xml", tmp_path / "cuda.xml"]
    for path, part in zip(files, (same_code, [c for c in cases if c not in same_code]),
                          strict=True):
        root = ElementTree.Element("testsuites")
        ElementTree.SubElement(root, "testsuite").extend(part)
        ElementTree.ElementTree(root).write(path)
    out = tmp_path / "traced.toml"
    assert traced_list.main([*map(str, files), "H100", "--out", str(out)]) == 0
    assert [entry["implementation"] for entry in tomllib.loads(out.read_text())["traced"]] == [
        "fp8_gemm/triton", "ms_deform_attn/triton"]


def test_the_rendered_list_is_what_traced_reads():
    text = traced_list.render(["fp8_gemm/triton"], "H100, torch 2.11")
    assert tomllib.loads(text)["traced"] == [
        {"implementation": "fp8_gemm/triton", "run": "H100, torch 2.11"}]
    assert tomllib.loads(traced_list.render([], "x"))["traced"] == []
