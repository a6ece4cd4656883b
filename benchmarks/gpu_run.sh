#!/usr/bin/env bash
# One device call on the H200: environment, GPU tests, the GPU conformance matrix with parity
# records, and the benchmarks. Everything lands under $OUT (logs and JSON packed in one tarball,
# since a call returns at most 8 files); a short table is printed last.
#
# Usage: OUT=/tmp/out [SLOTS=a,b] bash benchmarks/gpu_run.sh [stage ...]
#   stages: env tests matrix bench-fq bench-msda   (default: all, in that order)
#   SLOTS restricts the matrix to those slots (--slot), so the record run can be split across
#   device calls of 10 minutes each; each slot's records stay complete.
# The device copy has no .git of this repository, and records need one (commit + dirty flag):
#   here:   rm -rf .gitsnap && cp -r .git .gitsnap     (.gitsnap is in .git/info/exclude)
#   there:  rm -rf .git && cp -r .gitsnap .git && OUT=$OUT bash benchmarks/gpu_run.sh ...
#           with carry [".gitsnap"]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/libreyolo-gpu}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(env tests matrix bench-fq bench-msda)
summary=()

run() {  # run NAME TIMEOUT CMD...: log to $LOGS/NAME.log, remember the exit status
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-12s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
    tail -n 25 "$LOGS/$name.log"
}

for stage in "${stages[@]}"; do
    case $stage in
    env)
        run env 60 bash -c 'git log -1 --oneline; git status --short; nvidia-smi; python3 -c "import sys, torch, triton; \
print(sys.version); print(torch.__version__, torch.version.cuda, triton.__version__); \
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())"' ;;
    tests)
        run tests 300 python3 -m pytest tests -q -n 8 -p no:cacheprovider ;;
    matrix)
        # the gate's own command (conformance/gate.py RECORD_COMMAND), on 14 of the 16 cores
        run matrix 450 python3 -m pytest conformance -q -n 15 --dist worksteal -p no:cacheprovider \
            --gpu --record \
            --profile thorough --impl triton ${SLOTS:+--slot "$SLOTS"} \
            --matrix "$OUT/matrix_gpu.json"
        tar czf "$OUT/records.tgz" conformance/records 2>/dev/null ;;
    bench-fq)
        run bench-fq 240 python3 benchmarks/bench_fake_quant.py "$OUT/bench_fake_quant.json" ;;
    bench-msda)
        run bench-msda 180 python3 benchmarks/bench_ms_deform_attn.py "$OUT/bench_ms_deform_attn.json" ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
printf '\n== summary ==\n'
printf '%s\n' "${summary[@]}"
