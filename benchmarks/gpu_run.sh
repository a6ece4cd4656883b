#!/usr/bin/env bash
# One device call on the H200: environment, the GPU conformance matrix with parity records, GPU
# tests, and the benchmarks. Everything lands under $OUT (logs packed in one tarball, since a call
# returns at most 8 files: write nothing else there beyond a few result files); a short table is
# printed last, with each pytest stage's count line and FAILED/ERROR lines under its row.
#
# Usage: OUT=/tmp/out [BUDGET=570] bash benchmarks/gpu_run.sh [stage ...]
#   stages: env records plain bench-fq bench-host bench-host-old bench-unpack bench-attn bench-msda bench-ragged
#     bench-fp8 bench-finalized tests declarations finalized qat bench-qat hub sweep-unpack
#     sweep-msda sweep-fp8 probe-fp8 timestamps-msda bench-msda-det bench-compile profile-compile
#     controls-gpu bench-detectors fp8-policy traced
#     (default: all but hub, the sweeps, probe-fp8, timestamps-msda, qat, bench-qat,
#     bench-msda-det, bench-compile, profile-compile, controls-gpu, bench-detectors,
#     fp8-policy and traced, in that order)
#   records: `python -m conformance.evidence.rerecord` (the gate's own command): re-records exactly the
#     records the gate reports stale or missing, in groups of at most 540 s, each group's records
#     complete when it ends, then runs the plain GPU run when its evidence is stale.
#   traced: the traced CUDA test, and the traced_on_cuda.toml it supports (into $OUT, this tree
#     and build/: a later call on the warm machine starts with
#     `cp build/traced_on_cuda.toml libreyolo/kernels/` to benchmark what it validated).
#   plain: `pytest conformance/ --gpu -n auto`, exactly as a kernel author runs it; the run writes
#     its evidence (conformance/records/plain_gpu_run.json, conformance/evidence/plain_run.py).
#   TESTS: the test paths of the tests stage (default: every GPU test file).
#   hub: the Hub kernel end to end, offline (docs/hub_kernels.md, "Evidence"): installs `kernels`
#     from carried wheels (HUB_WHEELS, default .whl: the 44 wheels of `pip download
#     'kernels>=0.17,<0.18'` for CPython 3.12 manylinux x86_64), builds kernels-community's
#     deformable-detr from HUB_SOURCE (default .peers/kernels-community, holding deformable-detr/
#     and COMMIT) into a Hub-layout cache under a test lock (benchmarks/hub/build_msda.py), then
#     with HF_HUB_OFFLINE=1: the Hub GPU tests and the stand-in CPU tests, the `--impl hub`
#     conformance matrix (gathered with the build's provenance into
#     hub_ms_deform_attn_local_build.json: the evidence for benchmarks/results/), and the
#     Triton-vs-Hub benchmark rows (bench_ms_deform_attn_hub.json). HUB_STEPS (default
#     "tests matrix bench") picks which of those run after the install and build; the step
#     `detectors` (not in the default) runs bench_detectors.py with the Hub column
#     (--hub-build: a third copy per row kernelized from the build, docs/detectors.md, "Speed";
#     DETECTORS_ARGS: more options, as in bench-detectors) into bench_detectors_hub.json, e.g.
#     HUB_STEPS=detectors DETECTORS_ARGS="--families rt_detr --batches 8 --dtypes fp32".
#     Carry .whl and .peers/kernels-community with the checkout.
#   sweep-unpack: bench_unpack.py at 4096x4096, one process per kernel configuration: tile bytes
#     (SWEEP_TILES, default "16384 8192 32768") x warps (SWEEP_WARPS, default "8 4") x bfloat16
#     rounding (SWEEP_BF16: "hardware", the shipped cvt.rn.bf16x2.f32, and/or "integer", its
#     emulation; default "hardware"); "shipped" as the tiles or warps keeps unpack_tiles.toml's.
#     SWEEP_ARGS: more bench_unpack.py options for every run (e.g. "--dtypes bfloat16", or
#     "--rounds 3" with SWEEP_RUN_LIMIT, each run's seconds, default 40). Bfloat16 rounding on
#     the shipped tiles: SWEEP_TILES=shipped SWEEP_WARPS=shipped SWEEP_BF16="hardware integer"
#     SWEEP_ARGS="--dtypes bfloat16".
#   fp8-policy: the FP8 engage policy on this card (not in the default list): its checks and
#     per-layer times as bench-fp8 measures them, into fp8_policy.json, and the fp8_policy.toml
#     entries they support, into fp8_policy_entries.toml (what the toml needs: the log's end),
#     written into this tree's fp8_policy.toml too, so that later stages of the call (e.g.
#     bench-compile's FP8 MLP) run the card as measured.
#   sweep-fp8: the FP8 prologue's bits over every bf16/fp16 input and dynamic scale (the shipped
#     kernel: on sm_89+ the hardware E4M3 conversion), and its time against a device copy per
#     tile shape, division and E4M3 conversion (benchmarks/sweeps/sweep_fp8_prologue.py).
#   bench-msda-det: the deterministic MSDA backward against the atomic one on every speed-table
#     row (benchmarks/bench/bench_msda_deterministic.py; MSDA_DET_ARGS: more options, e.g. "--cases
#     rt_detr_decoder d_fine_decoder" or "--skip-check").
#   finalized: the finalized layers' CUDA tests (tests/nn/test_finalized_cuda.py) and the
#     exportable floor_log2 on the device; bench-finalized: bench_finalized.py's table.
#   qat: the QAT GPU tests (tests/nn/test_quantized_cuda.py: 20 QAT steps, Triton vs the
#     references bit for bit, eager and compiled; finalized CUDA outputs), deterministic
#     algorithms with CUBLAS_WORKSPACE_CONFIG=:4096:8; QAT_TESTS_ARGS: more pytest options
#     (e.g. "-x"). bench-qat: bench_qat.py's table (QAT_ARGS: e.g. "--modes
#     eager" and "--modes compiled" for two calls). Neither is in the default list: each needs
#     most of a call's budget.
#   BUDGET: seconds this script may take in all (a device command is cut at 600). Each stage's
#     time-out is cut to what is left, and a stage with under 30 s left is skipped, so the logs
#     and records written so far always come back.
# The device copy has no .git of this repository, and records need one (commit + dirty flag):
#   here:   rm -rf .gitsnap && cp -r .git .gitsnap     (.gitsnap is in .git/info/exclude)
#   there:  rm -rf .git && cp -r .gitsnap .git && OUT=$OUT bash benchmarks/gpu_run.sh ...
#           with carry [".gitsnap"]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/libreyolo-gpu}
LOGS="$OUT/logs"
BUDGET=${BUDGET:-570}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# torch.compile's on-disk caches off for every stage, as the root conftest does for the tests:
# a warm machine keeps them between calls, and they would hand a benchmark the graph of an
# operator as it was before a change to its fake kernel or autograd (pytorch/pytorch#144344)
export TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0
unset TRITON_INTERPRET
stages=("$@")
# the benchmarks before the tests: they time a quiet machine
[ ${#stages[@]} -eq 0 ] && stages=(env records bench-fq bench-host bench-unpack bench-attn bench-msda bench-ragged \
    bench-fp8 bench-finalized tests declarations finalized)
summary=()

run() {  # run NAME LIMIT CMD...: log to $LOGS/NAME.log, within LIMIT and what BUDGET leaves
    local name=$1 limit=$2; shift 2
    local left=$((BUDGET - SECONDS - 10))
    ((left < limit)) && limit=$left
    if ((limit < 30)); then
        summary+=("$(printf '%-24s skipped: %ss of the budget left' "$name" "$left")")
        return
    fi
    local start=$SECONDS
    # its own session, so nothing it started (pytest-xdist workers after a time-out) outlives
    # the stage and loads the CPU or the GPU under the next one: survivors are counted and killed
    setsid timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1 &
    local pid=$!
    wait "$pid"
    local rc=$?
    local survivors
    survivors=$(pgrep -c -s "$pid")
    kill -9 -- "-$pid" 2>/dev/null
    summary+=("$(printf '%-24s rc=%-3s %4ss (limit %ss), %s left running' "$name" "$rc" \
        "$((SECONDS - start))" "$limit" "$survivors")")
    # a pytest stage's verdict in the summary itself (the call's output keeps only its tail, and
    # the logs come back only while $OUT holds at most eight files): its count line and failures
    local verdict
    verdict=$(grep -E '^(FAILED|ERROR) |^=+ .*[0-9]+ (passed|failed|error)' "$LOGS/$name.log" \
        | tail -n 12 | cut -c1-200)
    [ -n "$verdict" ] && summary+=("$(sed 's/^/    /' <<<"$verdict")")
    tail -n 25 "$LOGS/$name.log"
}

for stage in "${stages[@]}"; do
    case $stage in
    env)
        run env 60 bash -c 'git log -1 --oneline; git status --short; nvidia-smi; python3 -c "import sys, torch, triton; \
print(sys.version); print(torch.__version__, torch.version.cuda, triton.__version__); \
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())"' ;;
    records)
        # the records the gate reports stale, then the plain run if its evidence is stale
        run records 560 python3 -m conformance.evidence.rerecord -n 15
        tar czf "$OUT/records.tgz" conformance/records 2>/dev/null ;;
    plain)
        # what a kernel author runs first, exactly; it writes conformance/records/plain_gpu_run.json
        run plain 420 python3 -m pytest conformance/ --gpu -n auto
        tar czf "$OUT/records.tgz" conformance/records 2>/dev/null ;;
    tests)
        # the tests that need the GPU (the interpreter's run on CPU, in CI)
        # -v: the log names every finished test, so one that hangs is the one missing
        run tests 420 python3 -m pytest -v --durations=30 -n 8 -p no:cacheprovider ${TESTS:-\
            tests/attention/test_triton_cuda.py tests/quant tests/kernels/quant/test_triton_provider.py \
            tests/registry/test_no_host_sync_cuda.py tests/kernels/quant/unpack_checks.py \
            tests/kernels/quant/test_unpack_provider.py tests/attention/test_fused_conformance.py \
            tests/attention/test_fused_export.py tests/attention/test_fused_policy.py \
            tests/attention/test_fused_sdpa_inputs.py \
            tests/attention/test_ragged_triton_cuda.py tests/registry/test_triton_launch_cuda.py \
            tests/kernels/quant/fp8_linear_checks.py tests/attention/test_deterministic_cuda.py \
            tests/kernels/test_operators.py tests/kernels/test_compiled_modules.py tests/hostile \
            tests/integrations/test_transformers_wiring_cuda.py} ;;
    traced)
        # which in-tree implementations compile to their own kernels (tests/kernels/
        # test_traced_kernels_cuda.py traces every traceable one; test_traced_kernel_code.py
        # checks inductor builds the code the eager launch runs), rendered as the
        # traced_on_cuda.toml that run supports: into $OUT, into this tree for the stages after
        # it, and into build/ (ignored, so kept on a warm machine) for the next call's stages
        run traced 300 python3 -m pytest -v -rs -n 4 -p no:cacheprovider \
            --junitxml="$LOGS/traced.xml" tests/kernels/test_traced_kernels_cuda.py \
            tests/kernels/test_traced_kernel_code.py
        python3 -m benchmarks.rendering.traced_list "$LOGS/traced.xml" "$(python3 -c "import \
torch, triton, time; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', \
triton.__version__, time.strftime('%Y-%m-%d'))")" --out "$OUT/traced_on_cuda.toml" \
            2>&1 | tee -a "$LOGS/traced.log"
        summary+=("    $(tail -n 1 "$LOGS/traced.log")")
        cp "$OUT/traced_on_cuda.toml" libreyolo/kernels/traced_on_cuda.toml
        mkdir -p build && cp "$OUT/traced_on_cuda.toml" build/traced_on_cuda.toml ;;
    declarations)
        # issue 20 on a real capture: the registry declines a backend declaring no graph capture
        # inside torch.cuda.graph; `--gpu --impl example-correct` passes with its cuda-graph
        # cells declared unsupported, and the same function registered undeclared fails them
        run declarations 300 python3 -m pytest -v -s -p no:cacheprovider \
            tests/registry/test_capabilities.py tests/conformance/test_declarations.py ;;
    bench-detectors)
        # whole transformers detectors, stock against wired (DETECTORS_ARGS: more options, e.g.
        # "--modes compiled compiled-ro --families rt_detr --batches 1")
        run bench-detectors 560 python3 benchmarks/bench/bench_detectors.py \
            "$OUT/bench_detectors.json" ${DETECTORS_ARGS:-} ;;
    bench-fq)
        run bench-fq 240 python3 benchmarks/bench/bench_fake_quant.py "$OUT/bench_fake_quant.json" ;;
    bench-host)
        # HOST_ARGS: more options for both bench-host stages (e.g. "--rounds 15")
        run bench-host 180 python3 benchmarks/bench/bench_host.py "$OUT/bench_host.json" \
            --profile "$LOGS/bench_host_profile.txt" ${HOST_ARGS:-} ;;
    bench-host-old)
        # bench_host.py of an earlier commit, in the same call (a refactor's host time against
        # its base): OLD (default .old) holds that commit's tree (git archive COMMIT | tar -x)
        # (benchmarks/bench/ since issue 51, benchmarks/ before)
        old_host="${OLD:-.old}/benchmarks/bench/bench_host.py"
        [ -f "$old_host" ] || old_host="${OLD:-.old}/benchmarks/bench_host.py"
        run bench-host-old 180 env PYTHONPATH="$PWD/${OLD:-.old}" python3 \
            "$old_host" "$OUT/bench_host_old.json" ${HOST_ARGS:-} ;;
    bench-unpack)
        # awaiting their records, the unpack kernels run only when selected by name
        # UNPACK_ARGS: more options (e.g. "--sizes 4096x4096" for the host rows alone)
        run bench-unpack 240 env LIBREYOLO_KERNELS=triton python3 benchmarks/bench/bench_unpack.py \
            "$OUT/bench_unpack.json" --rounds 1 ${UNPACK_ARGS:-} ;;
    sweep-unpack)
        # v5: every format x {bfloat16, float32} at 4096x4096 under each kernel configuration
        # (tile bytes x warps x bfloat16 rounding: SWEEP_TILES, SWEEP_WARPS, SWEEP_BF16; see the
        # usage), each in its own process (plans are kept per process), the likeliest first (a
        # run cut by BUDGET keeps what it measured). The processes first compile in parallel
        # (--compile-only fills Triton's cache), then run one after the other on the quiet GPU;
        # sweep_unpack_tiles.py gathers them into one JSON (a call returns at most 8 files) and
        # prints the picks (among runs of the shipped rounding).
        sweep="$OUT/sweep-unpack"
        mkdir -p "$sweep"
        configs=()
        for rounding in ${SWEEP_BF16:-hardware}; do for warps in ${SWEEP_WARPS:-8 4}; do
            for tile in ${SWEEP_TILES:-16384 8192 32768}; do
                configs+=("$tile $warps $rounding")
            done
        done; done
        sweep_args() {  # args: the bench_unpack.py options of the configuration "TILE WARPS BF16"
            read -r tile warps rounding <<<"$1"
            args=(--sizes 4096x4096 --bf16-rounding "$rounding")
            [ "$tile" != shipped ] && args+=(--tile-bytes "$tile")
            [ "$warps" != shipped ] && args+=(--num-warps "$warps")
            args+=(${SWEEP_ARGS:-})
        }
        limit=$((BUDGET - SECONDS - 10)); ((limit > 100)) && limit=100
        start=$SECONDS
        for config in "${configs[@]}"; do
            sweep_args "$config"
            setsid timeout "$limit" env LIBREYOLO_KERNELS=triton python3 \
                benchmarks/bench/bench_unpack.py /dev/null --compile-only "${args[@]}" \
                >"$LOGS/sweep-unpack-compile-${config// /-}.log" 2>&1 &
        done
        wait
        summary+=("$(printf '%-24s %4ss (limit %ss, %s processes in parallel)' \
            sweep-unpack-compile "$((SECONDS - start))" "$limit" "${#configs[@]}")")
        for config in "${configs[@]}"; do
            sweep_args "$config"
            run "sweep-unpack-${config// /-}" "${SWEEP_RUN_LIMIT:-40}" \
                env LIBREYOLO_KERNELS=triton python3 benchmarks/bench/bench_unpack.py \
                "$sweep/${config// /-}.json" --rounds 1 --repeats 50 --host-calls 100 \
                --checked-rows 512 "${args[@]}"
        done
        python3 benchmarks/sweeps/sweep_unpack_tiles.py "$OUT/unpack_tile_sweep_v5.json" \
            "$sweep"/*.json >"$LOGS/sweep-unpack-gather.log" 2>&1
        cat "$LOGS/sweep-unpack-gather.log"
        tar czf "$OUT/sweep_unpack_runs.tgz" -C "$OUT" sweep-unpack && rm -rf "$sweep" ;;
    sweep-msda)
        # the MSDA kernels' query block on the medium and large classic and ragged cases
        # (MSDA_SWEEP_ARGS: e.g. "--sizes medium --no-ragged --blocks 8,16"; each block compiles
        # both kernels for every case, so the whole sweep outgrows one stage)
        run sweep-msda 300 python3 benchmarks/sweeps/sweep_ms_deform_attn_blocks.py \
            "$OUT/sweep_ms_deform_attn_blocks.json" ${MSDA_SWEEP_ARGS:-} ;;
    bench-attn)
        # v3: eager as interleaved rounds of queued windows beside graph replays; the JSON is
        # rewritten after every site, so a run cut by its limit keeps what it measured.
        # ATTN_ARGS: more options (e.g. "--sites swin/stage1_shifted zipdepth/stage4_global")
        run bench-attn 150 python3 benchmarks/bench/bench_attention.py "$OUT/bench_attention.json" \
            ${ATTN_ARGS:-} ;;
    bench-msda)
        # Deformable DETR's op, built from a source checkout carried in .peers/ (never committed)
        run bench-msda 420 env LIBREYOLO_PEER_DEFORMABLE_DETR="$PWD/.peers/Deformable-DETR" \
            python3 benchmarks/bench/bench_ms_deform_attn.py "$OUT/bench_ms_deform_attn.json" ;;
    timestamps-msda)
        # the eager forward+backward's host time by segment, ours / the peer / a no-work Function
        run timestamps-msda 180 env LIBREYOLO_PEER_DEFORMABLE_DETR="$PWD/.peers/Deformable-DETR" \
            python3 benchmarks/profiles/timestamps_ms_deform_attn.py "$OUT/timestamps_ms_deform_attn.md" ;;
    hub)
        hub_build="$OUT/hub-build"
        run hub-install 120 env PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-index \
            --find-links "${HUB_WHEELS:-.whl}" \
            'kernels>=0.17,<0.18'
        run hub-build 360 python3 benchmarks/hub/build_msda.py \
            "${HUB_SOURCE:-.peers/kernels-community}" "$hub_build"
        cp "$hub_build/build.json" "$OUT/hub_build.json" 2>/dev/null
        cp "$hub_build/lock.toml" "$OUT/hub_test_lock.toml" 2>/dev/null
        # offline, from the local build's cache and test lock (set before anything imports them)
        export HF_HUB_OFFLINE=1 HF_HUB_CACHE="$hub_build/hf-cache" \
            LIBREYOLO_HUB_LOCAL_BUILD="$hub_build"
        steps=" ${HUB_STEPS:-tests matrix bench} "
        [[ $steps == *" tests "* ]] && run hub-tests 240 python3 -m pytest -v -n 4 \
            -p no:cacheprovider tests/attention/test_hub_cuda.py tests/kernels/hub
        [[ $steps == *" matrix "* ]] && run hub-matrix 360 \
            env PYTEST_PLUGINS=benchmarks.hub.local_lock python3 -m pytest conformance/ --gpu \
            --impl hub --slot ms_deform_attn -n 8 -q -p no:cacheprovider \
            --matrix "$OUT/hub_matrix.json" --summary "$OUT/hub_matrix.md"
        [[ $steps == *" matrix "* ]] && \
            python3 benchmarks/hub/evidence.py "$OUT" "$OUT/hub_ms_deform_attn_local_build.json"
        [[ $steps == *" bench "* ]] && run hub-bench 300 \
            python3 benchmarks/bench/bench_ms_deform_attn.py "$OUT/bench_ms_deform_attn_hub.json" \
            --skip-host-path
        [[ $steps == *" detectors "* ]] && run hub-detectors 420 \
            python3 benchmarks/bench/bench_detectors.py "$OUT/bench_detectors_hub.json" \
            --hub-build "$hub_build" ${DETECTORS_ARGS:-}
        unset HF_HUB_OFFLINE HF_HUB_CACHE LIBREYOLO_HUB_LOCAL_BUILD
        rm -rf "$hub_build" ;;
    bench-msda-det)
        # the fixed-point backward under torch.use_deterministic_algorithms against the atomic one:
        # the checks first (bounded cell, 10 runs bit for bit), then eager, backward-only and graph
        # timings; the JSON is rewritten after every row
        run bench-msda-det 420 python3 benchmarks/bench/bench_msda_deterministic.py \
            "$OUT/bench_msda_deterministic.json" ${MSDA_DET_ARGS:-} ;;
    bench-ragged)
        run bench-ragged 180 python3 benchmarks/bench/bench_ms_deform_attn_ragged.py \
            "$OUT/bench_ms_deform_attn_ragged.json" ;;
    bench-fp8)
        # selects the FP8 implementations by name itself while they await their records; writes
        # the policy table it measured beside its results (libreyolo/kernels/quant/execute/)
        run bench-fp8 240 python3 benchmarks/bench/bench_fp8.py "$OUT/bench_fp8.json" \
            --policy "$OUT/fp8_policy.toml" ;;
    fp8-policy)
        # the FP8 engage policy measured on this card as on the H200 (bench_fp8.py's checks and
        # layers, nothing else; benchmarks/bench/measure_fp8_policy.py), then the toml entries it
        # supports and what fp8_policy.toml needs for them (benchmarks/rendering/fp8_policy.py)
        run fp8-policy 180 python3 benchmarks/bench/measure_fp8_policy.py "$OUT/fp8_policy.json"
        python3 -m benchmarks.rendering.fp8_policy --from "$OUT/fp8_policy.json" --write \
            >"$OUT/fp8_policy_entries.toml" 2>"$LOGS/fp8-policy-entries.log"
        cat "$OUT/fp8_policy_entries.toml" "$LOGS/fp8-policy-entries.log"
        summary+=("$(sed 's/^/    /' "$LOGS/fp8-policy-entries.log")") ;;
    sweep-fp8)
        run sweep-fp8 150 python3 benchmarks/sweeps/sweep_fp8_prologue.py "$OUT/sweep_fp8_prologue.json" ;;
    probe-fp8)
        # fast against float32 accumulation in the FP8 GEMM: time and error, and the K sweep
        # behind fp8_linear.FAST_ACCUMULATION_MAX_K
        run probe-fp8 120 python3 benchmarks/profiles/probe_fp8_fast_accum.py "$OUT/fp8_fast_accum_probe.json" ;;
    bench-finalized)
        run bench-finalized 240 python3 benchmarks/bench/bench_finalized.py "$OUT/bench_finalized.json" ;;
    finalized)
        run finalized 300 python3 -m pytest -v -n 4 -p no:cacheprovider \
            tests/nn/test_finalized_cuda.py tests/quant/test_quant_format_tables.py -k \
            'test_finalized_cuda or floor_log2' ;;
    qat)
        run qat 560 env CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 -m pytest -v -n 4 \
            -p no:cacheprovider tests/nn/test_quantized_cuda.py ${QAT_TESTS_ARGS:-} ;;
    bench-qat)
        run bench-qat 560 python3 benchmarks/bench/bench_qat.py "$OUT/bench_qat.json" ${QAT_ARGS:-} ;;
    bench-compile)
        # torch.compile against eager, the slots as operators (COMPILE_ARGS: e.g. "--quick");
        # torchao's float8 path beside the FP8 MLP: its wheel installed from .whl when carried
        ls .whl/torchao-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps .whl/torchao-*.whl
        run bench-compile 420 python3 benchmarks/bench/bench_compile.py "$OUT/bench_compile.json" \
            ${COMPILE_ARGS:-} ;;
    profile-compile)
        # where a compiled call's time goes: host (cProfile) and kernels (torch.profiler)
        # PROFILE_ARGS: e.g. "--any-device" (the FP8 policy engages on a GPU it does not list)
        run profile-compile 240 python3 benchmarks/profiles/profile_compile.py "$LOGS/profile_compile.txt" \
            ${PROFILE_ARGS:-} ;;
    controls-gpu)
        # every negative control judged on CUDA by the check it names, and the bounded controls'
        # error over bound per case (benchmarks/sweeps/control_margins.py)
        run controls-gpu 240 python3 -m pytest -q -p no:cacheprovider -n 8 --gpu \
            conformance/test_negative_controls.py conformance/test_determinism.py
        run control-margins 120 python3 benchmarks/sweeps/control_margins.py cuda \
            "$OUT/control_margins_cuda.json" fp8_gemm,fp8_gemm_tensorwise ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
printf '\n== summary ==\n'
printf '%s\n' "${summary[@]}"
