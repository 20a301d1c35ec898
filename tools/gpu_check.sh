#!/bin/bash
# gpu_check.sh: the GPU machine's usual work, from the repository root,
# with binaries built beforehand on a machine with Go (they need no Go
# there):
#
#   CGO_ENABLED=0 go test -c -o gpu/cuda.test ./backend/cuda
#   CGO_ENABLED=0 go build -tags nomodel -ldflags="-s -w" -o gpu/replayssm ./cmd/replayssm
#
#   tools/gpu_check.sh tests            # the cuda package's tests (GPU and CPU)
#   tools/gpu_check.sh bench            # docs/PERF.md's tables: batch 256 and 1, four shapes, fp32 and bf16
#   tools/gpu_check.sh bench gpu/old    # the same with a second binary (an earlier build) in the same run
#   tools/gpu_check.sh profile REGEX ARGS...  # ncu of the kernels matching REGEX in `bench kernels ARGS`
#
# Results go to $OUT (the device tool's folder) or /tmp/gpu_check: a
# summary on stdout, logs and the --json rows in files (tools/perf_table.py
# turns rows into markdown). The kernel cache is kept in /tmp/kcache for
# the call.
set -u
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export REPLAYSSM_KERNEL_CACHE=${REPLAYSSM_KERNEL_CACHE:-/tmp/kcache}

tests() {
	local t0=$SECONDS
	(cd backend/cuda && ../../gpu/cuda.test -test.v -test.parallel "$(nproc)" -test.timeout 480s) >"$out/tests.log" 2>&1
	local rc=$?
	echo "tests: exit $rc in $((SECONDS - t0)) s, $(grep -c -- '--- PASS' "$out/tests.log") passed, $(grep -c -- '--- SKIP' "$out/tests.log") skipped"
	grep -m1 '^kernels:' "$out/tests.log"
	grep -E -- '--- FAIL|^panic|^FAIL' "$out/tests.log" | head -20
	return $rc
}

# table runs one binary over the batch-256 and batch-1 rows into $out/$2.
table() { # binary, file
	local t0=$SECONDS
	"$1" bench kernels --device cuda --batch 256,1 --shapes all --state-dtype fp32,bf16 \
		--modes baseline,replay,replay-nvfp4,verify-baseline,verify --min-time 30ms --json >"$out/$2" 2>"$out/$2.err"
	local rc=$?
	echo "bench $1: exit $rc in $((SECONDS - t0)) s, $(grep -c '^{' "$out/$2") rows in $2"
	tail -2 "$out/$2.err"
	return $rc
}

bench() {
	if [[ -n ${1:-} ]]; then
		table "$1" other.jsonl
	fi
	table gpu/replayssm rows.jsonl
}

profile() { # kernel regex, then bench kernels arguments
	local kernel=$1 ncu
	shift
	ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
	"$ncu" --clock-control none --kernel-name "regex:$kernel" --launch-skip "${LAUNCH_SKIP:-5}" --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
		-f -o "$out/profile" gpu/replayssm bench kernels --device cuda --min-time 5ms "$@" >"$out/profile.log" 2>&1
	echo "profile: exit $?"
	"$ncu" -i "$out/profile.ncu-rep" --page details >"$out/profile.txt" 2>&1
	grep -E "Duration|Memory Throughput|Achieved Occupancy|Registers Per" "$out/profile.txt" | head
}

case "${1:-}" in
tests) tests ;;
bench) bench "${2:-}" ;;
profile)
	shift
	profile "$@"
	;;
*)
	echo "usage: tools/gpu_check.sh tests | bench [OTHER_BINARY] | profile REGEX ARGS..." >&2
	exit 2
	;;
esac
