#!/bin/bash
# gpu_check.sh: the GPU machine's usual work in one call, from the repository
# root, with the binaries built beforehand on a machine with Go (they need no
# Go there):
#
#   CGO_ENABLED=0 go test -c -o gpu/cuda.test ./backend/cuda
#   CGO_ENABLED=0 go build -tags nomodel -ldflags="-s -w" -o gpu/replayssm ./cmd/replayssm
#
#   tools/gpu_check.sh tests      # the cuda package's tests, subtests in parallel (then tests_rest, ring, early)
#   tools/gpu_check.sh bench256   # docs/PERF.md's batch-256 table (fp32, bf16; every mode)
#   tools/gpu_check.sh bench1     # the batch-1 table
#   tools/gpu_check.sh all        # the three, in this order
#   tools/gpu_check.sh fold_phases  # the GDN flush by phase (FOLD_SKIP), FMA and tensor-core folds
#   tools/gpu_check.sh base_skip  # the GDN baselines without their arithmetic (BASE_SKIP)
#   tools/gpu_check.sh fold_exact  # the GDN exact fold where the default folds cached u (FOLD_CACHED=0): tests, then against the defaults
#   tools/gpu_check.sh profile_b1 # ncu of the batch-1 verify kernels
#   tools/gpu_check.sh nvfp4_gpf  # the nvfp4 group step's passes in flight (GPF), every shape
#   tools/gpu_check.sh profile_nonflush # ncu of the GDN non-flush step (nvfp4, fp32), the nvfp4 step's knobs
#   tools/gpu_check.sh group_tc   # the GDN nvfp4 group step on the tensor cores: tests, against GROUP_TC=0, ncu
#   tools/gpu_check.sh group_occ  # the GDN group step's strips in flight (GTPF) and blocks an SM (GMINB, _GROUP_STAGED)
#   tools/gpu_check.sh group_final  # session 21's other replay tests and the GDN batch-256 rows
#   tools/gpu_check.sh group_tc2  # both layers' nvfp4 group steps on the tensor cores: tests, against GROUP_TC=0
#   tools/gpu_check.sh gdn_pf     # the GDN group step asking for the next item during this one (GDN_PF=1): tests, against the defaults
#   tools/gpu_check.sh group_tc_bf16  # bf16 group streams on the tensor cores (GROUP_TC=1, asked): tests, against the defaults
#   tools/gpu_check.sh verify_tc  # the GDN group verify on the tensor cores: tests, against VERIFY_TC=0; the 122B step at GMINB=5
#   tools/gpu_check.sh verify_tc2  # both layers' verify on the tensor cores: tests, against VERIFY_TC=0, the batch-256 table
#   tools/gpu_check.sh verify_pf  # the tensor-core verify's passes in flight (GVPF)
#   tools/gpu_check.sh e4m3_tc    # the e4m3 (fp8) tensor-core streams, asked for: tests, the fp8 step against its FMA stream
#   tools/gpu_check.sh e4m3_default  # the e4m3 streams by default (session 23): tests, verify-fp8 and fp8 checkpoints against the FMA streams, the verify by part (GV_SKIP)
#   tools/gpu_check.sh fold_stream  # the GDN verify's streamed early folds (session 24): tests, against the old folds, its warps, GV_SKIP=4
#   tools/gpu_check.sh flush_stream  # the GDN flush by strips (sessions 24-25): its tests, then against gdn_replay_flush and its buffers
#   tools/gpu_check.sh flush_warps  # the streamed flush's own warps (session 26, not yet run as split): its tests, then bf16 against four warps
#   tools/gpu_check.sh fl_pad  # session 28's defaults (FL_PAD, gdnStaged64) against each undone, then bench256: first next session
#   tools/gpu_check.sh trace  # the GDN kernels' block timelines (-DTRACE=1, bench --trace, tools/trace_summary.py; session 29)
#   tools/gpu_check.sh order  # the step's non-flush kernel queued before its flush (OVERLAP_ORDER=main; session 29)
#   tools/gpu_check.sh queue  # the flush's items from a counter (FL_QUEUE) with and without OVERLAP_ORDER=main (session 29)
#   tools/gpu_check.sh few  # session 29's FL_FEW default for fp32 (written after its device time): tests, against FL_FEW=0 at 256/512/64, bench256: first next session
#   tools/gpu_check.sh m2tc  # the Mamba-2 folds' rank update on the tensor cores forced (M2_TC_FOLD), the Mamba-2 table rows (written in session 31, run in 32)
#   tools/gpu_check.sh m2default # the Mamba-2 tensor-core fold by default against =0, the Mamba-2 table rows: session 32
#   tools/gpu_check.sh fp8enc # e4m3 encoded by the hardware conversion against =0, the codec test: session 32
#   tools/gpu_check.sh m2srot # the codec test again, the tensor-core fold's rotated checkpoint reads (written in session 32, run in 33)
#   tools/gpu_check.sh nansel # e4m3 NaN codes after the hardware conversion (NAN_SELECT, session 33): tests, against =0
#   tools/gpu_check.sh nansel2 # the conversion's own NaN code (NAN_SELECT=2, the default since): the codec test, the three settings (session 33)
#   tools/gpu_check.sh readcopy # the read-copy conformance test and the nvfp4 quotients by reciprocal (NV_QDIV): first next session (session 33)
#   tools/gpu_check.sh bf16nan # bf16 stores without their NaN branch (BF16_NAN_BRANCH=0): second next session (session 33)
#   tools/gpu_check.sh nvpipe # the nvfp4 flush: the lean quantiser (NV_LEAN) and Mamba-2's on the pipelined fold (FOLDS=pipe), then bench256: after `tests`, next session (session 34)
#   tools/gpu_check.sh ring # the Mamba-2 bf16 ring's tests (session 35; first run clean in session 36)
#   tools/gpu_check.sh ringbench # batch 256, Mamba-2, bf16 ring against fp32 ring (ringitems: both on the items flush)
#   tools/gpu_check.sh early # the Mamba-2 group step's per-token inputs by cp.async (GROUP_EARLY, session 36's default): tests (earlybench: the rows against GROUP_EARLY=0)
#   tools/gpu_check.sh vfolddots # a verify's early folds forming the group verify's dots (VFOLD_DOTS, session 37; Mamba-2 fp32 default since 38; Mamba-2 bf16 and GDN with =1, session 38): tests, then the rows with it off and on
#   tools/gpu_check.sh step_own  # the small step's last block moving its own row's cursor without a load (STEP_OWN, session 39): tests, then batches 1 and 4 against the defaults
#   tools/gpu_check.sh m2stages # the Mamba-2 pipelined folds' stages (FOLD_STAGES 2, 4) on fp8 and bf16 checkpoints (session 33)
#   tools/gpu_check.sh m2overlap  # Mamba-2's flush beside the step (OVERLAP=1) and its timelines (session 31)
#   tools/gpu_check.sh carveout  # replay under REPLAYSSM_CUDA_CARVEOUT=100, with and without FL_PAD (session 28)
#   tools/gpu_check.sh l1  # read_items beside unused shared memory, the group steps with fewer ring rows staged (session 28)
#   tools/gpu_check.sh read_sums  # read_items with and without a group step's per-pass sums (session 27)
#   tools/gpu_check.sh profile_stream  # ncu's memory sections of the non-flush group step and of read_items (session 26's question)
#   tools/gpu_check.sh l2pf  # the flush's tests, the read-only bandwidth, the group streams' L2 prefetch and their loads alone (session 26)
#   tools/gpu_check.sh overlap_stream  # the streamed flush and verify folds beside the other kernel (OVERLAP_BLOCKS, VERIFY_OVERLAP)
#   tools/gpu_check.sh experiments  # batch 256, the kernel knobs
#                                   # (REPLAYSSM_CUDA_GROUP_THREADS, _KERNELS=v5;
#                                   # -DGROUP_NODOTS=1 measures the stream alone,
#                                   # -DGV_SKIP=4/5/6/7 the verify's parts,
#                                   # _FOLD_ITEMS=0 the early folds' grid,
#                                   # _FOLD_STREAM=0 the GDN early folds
#                                   # without the stream kernel,
#                                   # -DLOAD_FIRST=0 the drafts' loads in loops,
#                                   # -DBASE_EARLY=0 the bf16 baselines' first pass
#                                   # after their prologue, _FOLDS=items|pipe the
#                                   # flushes and early folds, _BASE_THREADS=128
#                                   # the baselines' blocks, _BASE_STAGE=0 the
#                                   # baseline step without its stage,
#                                   # -DSTORE_V4=0 / -DBASE_VPAD=0 its 16-byte
#                                   # stores / padded vectors; at batch 1,
#                                   # -DTOKEN_ROWS=0 the small step's last
#                                   # token loads after its last barrier;
#                                   # _OVERLAP=0|1 and _OVERLAP_BLOCKS the
#                                   # flush beside the non-flush kernel at
#                                   # batch 64 and 256, _VERIFY_OVERLAP=1 a
#                                   # verify's early folds beside the group
#                                   # verify of the other slots; at batch 1
#                                   # _HEAD_SPLIT=2|4 the small step's
#                                   # heads split, _SPLIT_VERIFY=0 and
#                                   # _VERIFY_EARLY=0|1 the small verify's)
#                                   # against the defaults, text tables
#   source tools/gpu_check.sh functions  # define tests, bench, experiment and profile only
#
# Results go to $OUT (the device tool's folder) or /tmp/gpu_check: a summary
# on stdout, the logs and the --json rows in files (tools/perf_table.py turns
# the rows into markdown). Benchmarks run alone, after the tests. Every
# call starts from gpu/kcache.tar.xz where there is one and leaves its
# kernel cache in $OUT/kcache.tar.xz (kcache_save below): copy that into
# gpu/ before the next call.
set -u
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
test_bin=gpu/cuda.test
cli=gpu/replayssm

# The kernel cache from one device call to the next. A call's machine may be
# a fresh one whose NVRTC has compiled nothing (the four shapes' bench
# compiles ~60 modules, the tests hundreds), so the cache a call leaves goes
# back as $OUT/kcache.tar.xz (newest entries first, at most KCACHE_MB, 6 MiB:
# the carried tree's limit is 64 MiB, and the repository and binaries take
# ~56), and a call that finds it in gpu/ (copy it there from the last call's
# files; carry ["gpu"]) starts from it. An entry is named by its source,
# options, architecture and NVRTC version (nvrtc.go's cacheKey): a changed
# kernel, or another machine's NVRTC, just misses. KCACHE_MB=0 keeps none.
kcache=${REPLAYSSM_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/replayssm/kernels}
kcache_restore() {
	local f
	for f in gpu/kcache.tar.xz gpu/kcache.tgz gpu/kcache.tar; do
		[[ -f $f ]] || continue
		mkdir -p "$kcache" && tar -xf "$f" -C "$kcache" &&
			echo "kernel cache: $(ls "$kcache" | wc -l) entries from $f"
		return
	done
}
kcache_save() {
	local mb=${KCACHE_MB:-6} f="$out/kcache.tar.xz" z=-J n
	[[ -n ${OUT:-} && -d $kcache && $mb -gt 0 ]] || return 0
	# At most 8 files come back from $OUT: the results first.
	local have
	have=$(find "$out" -maxdepth 3 -type f ! -name 'kcache.*' | wc -l)
	if ((have >= 8)); then
		echo "kernel cache: not saved ($have result files in \$OUT; 8 come back)"
		return 0
	fi
	command -v xz >/dev/null || { f="$out/kcache.tgz" z=-z; }
	local files size raw=0 ratio=8
	[[ $z == -z ]] && ratio=3
	mapfile -t files < <(cd "$kcache" && ls -t)
	# Cubins compress 7x (Nano's fp32 module alone) to 14x (26 modules in
	# one archive) by xz, 3.7x by gzip: the newest entries of up to ratio x
	# KCACHE_MB first, then fewer in proportion until the archive fits.
	for ((n = 0; n < ${#files[@]}; n++)); do
		raw=$((raw + $(stat -c %s "$kcache/${files[n]}")))
		((raw > ratio * (mb << 20))) && break
	done
	while ((n > 0)); do
		(cd "$kcache" && XZ_OPT=-T0 tar -c $z -f "$f" "${files[@]:0:n}") || return 0
		size=$(stat -c %s "$f")
		((size <= mb << 20)) && break
		n=$((n * (mb << 20) / size * 9 / 10 < n - 1 ? n * (mb << 20) / size * 9 / 10 : n - 1))
	done
	((n > 0)) || rm -f "$f"
	echo "kernel cache: $n of ${#files[@]} entries to $(basename "$f")"
}
kcache_restore
trap kcache_save EXIT
# The test binary uses it too (TestMain; without it, a cache of its own).
export REPLAYSSM_KERNEL_CACHE=$kcache

# tests_rest: the package's last tests (resources, traces), which `tests`
# leaves to the target of that name so that each fits a device call.
tests_rest='TestReplayKernelResources|TestReplayTraceRecordsBlocks|TestReplayTraceMamba2|TestDecodeTrace|TestReplayInputAlignment'

tests() {
	# NVRTC compiles dominate (hundreds of modules): the subtests run in
	# parallel, one per core. The whole package took ~450 s on the H200 in
	# session 14 (the small step's split modules compile too): run it alone
	# in a device call of its own. The tests that have targets of their own
	# (`ring`, `early`: sessions 35-36, each tens of modules) are left to
	# them, and the last few in the package's order to `tests_rest`: in
	# session 36 the rest took 560 s and stopped in TestReplayKernelResources
	# (906 passed; tests_rest's 20 then passed in 51 s). TESTS_SKIP= runs
	# all.
	local t0=$SECONDS
	"$test_bin" -test.v -test.parallel "$(nproc)" -test.timeout 560s \
		-test.skip "${TESTS_SKIP-^(TestReplayRingBF16IsRoundedInputs|TestReplayGroupEarlyMatches|$tests_rest)\$}" >"$out/tests.log" 2>&1
	local rc=$?
	echo "tests: exit $rc in $((SECONDS - t0)) s, $(grep -c -- '--- PASS' "$out/tests.log") passed, $(grep -c -- '--- SKIP' "$out/tests.log") skipped"
	grep -m1 '^kernels:' "$out/tests.log"
	grep -E -- '--- FAIL|^panic|^FAIL' "$out/tests.log" | head -20
	return $rc
}

# e4m3_tests: the e4m3 (fp8 checkpoint or read copy) replay tests of both layers.
e4m3_tests='TestReplayPipelineMatchesV4/.*/(e4m3|fp16\+e4m3)|TestReplayCacheSpeculative/.*/replay-(e4m3|fp16\+e4m3)|TestReplayCacheMatchesReference/.*/replay/.*e4m3'

bench() { # batch, file
	"$cli" bench kernels --device cuda --batch "$1" --shapes "${SHAPES:-all}" --state-dtype fp32,bf16 \
		--modes baseline,replay,replay-nvfp4,replay-fp8,verify-baseline,verify,verify-nvfp4,verify-fp8 --min-time 30ms --json >"$out/$2" 2>"$out/$2.err"
	local rc=$?
	echo "bench batch $1: exit $rc, $(grep -c '^{' "$out/$2") rows in $2"
	tail -3 "$out/$2.err"
	return $rc
}

# experiment runs one text table of the modes a knob changes, with the
# defaults and with each setting given (name, shapes, modes, then settings:
# "VAR=value VAR2=value2"), at batch $BATCH (256 unless set).
experiment() {
	local name=$1 shapes=$2 modes=$3
	shift 3
	local f="$out/exp_$name.txt"
	local env w args
	for env in "" "$@"; do
		echo "== ${env:-defaults}" >>"$f"
		# A word that starts with - belongs to the assignment before it
		# ("REPLAYSSM_CUDA_DEFINES=-DA=1 -DB=2": one variable). Before
		# session 22, env took -DB=2 for a variable of its own, so the
		# settings of two defines in one string ran with the first alone.
		args=()
		for w in $env; do
			if [[ $w == -* && ${#args[@]} -gt 0 ]]; then
				args[-1]+=" $w"
			else
				args+=("$w")
			fi
		done
		env "${args[@]}" "$cli" bench kernels --device cuda --batch "${BATCH:-256}" --shapes "$shapes" --state-dtype "${DTYPES:-fp32,bf16}" \
			--modes "$modes" --min-time 30ms >>"$f" 2>&1
	done
	echo "experiment $name: $f"
	grep -v '^device' "$f"
}

# some_tests runs the tests matching a -test.run pattern (name, timeout in
# seconds, pattern) into $out/tests_NAME.log and prints their tally, the
# failures and sameOutputs' inexact-step lines.
some_tests() {
	local f="$out/tests_$1.log"
	"$test_bin" -test.v -test.parallel "$(nproc)" -test.timeout "$2s" -test.run "$3" >"$f" 2>&1
	echo "$1 tests: exit $?, $(grep -c -- '--- PASS' "$f") passed"
	grep -m1 '^kernels:' "$f"
	grep -E -- '--- FAIL|^FAIL|panic|inexact step' "$f" | sort | uniq -c | head -40
}

# profile runs ncu on one launch of the kernels matching a regex (name,
# kernel regex, then the bench's arguments after "kernels --device cuda"),
# with the stall reasons by source line: the modules are built with
# -lineinfo (REPLAYSSM_CUDA_DEFINES), the report goes to $out/prof_NAME.ncu-rep
# and its SASS-level source page (stall samples per instruction) to
# $out/prof_NAME.txt. ncu needs --clock-control none on this lease. The
# device tool brings back at most 8 files a call: profile keeps three per
# kernel (the details with the bench's log, the SASS source CSV, the CUDA
# lines with their SASS).
profile() {
	local name=$1 kernel=$2
	shift 2
	local ncu
	ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
	# NCU_EXTRA: more ncu options (e.g. --warp-sampling-interval 0 for a
	# short kernel's stall samples); NCU_SECTIONS: more sections ("--section
	# MemoryWorkloadAnalysis ..."); LAUNCH_SKIP: the matching launches
	# skipped (5; the replay bench's 16th gdn_replay_flush, LAUNCH_SKIP=15,
	# is its first aligned flush: 15 empty ones in the non-flush graph
	# before it).
	# shellcheck disable=SC2086
	REPLAYSSM_CUDA_DEFINES="-lineinfo ${REPLAYSSM_CUDA_DEFINES:-}" "$ncu" --clock-control none ${NCU_EXTRA:-} \
		--kernel-name "regex:$kernel" --launch-skip "${LAUNCH_SKIP:-5}" --launch-count 1 --import-source yes \
		--section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy ${NCU_SECTIONS:-} \
		-f -o "$out/prof_$name" "$cli" bench kernels --device cuda --min-time 5ms "$@" >"$out/prof_$name.log" 2>&1
	echo "profile $name: exit $?"
	"$ncu" -i "$out/prof_$name.ncu-rep" --page details >"$out/prof_$name.txt" 2>&1
	"$ncu" -i "$out/prof_$name.ncu-rep" --page source --csv --print-source sass >"$out/prof_${name}_sass.csv" 2>&1
	# The CUDA lines beside their SASS (-lineinfo): which source a stall
	# site is (session 15's profile had the SASS alone); tools/ncu_stalls.py
	# sums its stall samples by line.
	"$ncu" -i "$out/prof_$name.ncu-rep" --page source --csv --print-source cuda,sass >"$out/prof_${name}_src.csv" 2>&1
	grep -E "Duration|Warp Cycles Per Issued|Eligible Warps|Achieved Occupancy|Registers Per" "$out/prof_$name.txt" | head
	# At most 8 files come back from a device call: the report itself only
	# with KEEP_REP=1, the bench's log appended to the text.
	cat "$out/prof_$name.log" >>"$out/prof_$name.txt" && rm -f "$out/prof_$name.log"
	[ "${KEEP_REP:-0}" = 1 ] || rm -f "$out/prof_$name.ncu-rep"
}

case "${1:-all}" in
tests) tests ;;
bench256) bench 256 b256.jsonl ;;
bench1) bench 1 b1.jsonl ;;
all)
	tests
	bench 256 b256.jsonl
	bench 1 b1.jsonl
	;;
functions) ;; # `source tools/gpu_check.sh functions`: the functions alone, for a script of runs
fold_exact)
	# The GDN exact fold where the default folds the ring's cached u
	# (replay.Options.ExactFold; FOLD_CACHED=0): its tests (the reference
	# and speculative tests' exact-fold variants, the poisoned-ring test),
	# then the GDN shapes' replay and verify under -DFOLD_CACHED=0 against
	# the defaults.
	# (-test.run splits its pattern at each / into one regexp a level of
	# the subtests' names, so alternatives of different depths take a run
	# each.)
	for run in 'TestReplayCacheMatchesReference/gdn/replay/./exact-fold' 'TestReplayCacheSpeculative/gdn/exact-fold' \
		'TestReplayFoldCachedReadsRing' 'TestReplayModulesCompile/gdn/replay/./exact'; do
		"$test_bin" -test.v -test.parallel "$(nproc)" -test.timeout 300s -test.run "$run" >>"$out/tests_exact.log" 2>&1
		echo "tests $run: exit $?"
	done
	echo "tests: $(grep -c -- '--- PASS' "$out/tests_exact.log") passed (subtests and their parents)"
	grep -E -- '--- FAIL|^panic|^FAIL' "$out/tests_exact.log" | head -20
	experiment exact qwen3.5-4b,qwen3.5-122b replay,verify REPLAYSSM_CUDA_DEFINES=-DFOLD_CACHED=0
	;;
base_skip)
	# The GDN baseline step with its passes copying their chunks back
	# (BASE_SKIP=1, NOTES.md session 18 Next 2: the outputs are wrong)
	# against the defaults: near copy bandwidth, the bf16 step's arithmetic
	# is what holds it at 84-87%; near the default, its block's structure.
	experiment base_skip qwen3.5-4b,qwen3.5-122b baseline REPLAYSSM_CUDA_DEFINES=-DBASE_SKIP=1
	;;
fold_phases)
	# The GDN flush by phase (session 17's table in NOTES.md): FOLD_SKIP 1
	# the projections, 2 the u' recurrence, 4 the rank update, 5 both
	# products, 8 the gram dots and decay chains, 15 every phase (the
	# outputs are then wrong), on the FMA fold and the tensor-core fold, in
	# the aligned flush column at batch 256 (28 module compiles: a call of
	# its own).
	f="$out/exp_fold_phases.txt"
	for tc in 0 1; do
		for skip in 0 1 2 4 5 8 15; do
			echo "== TC_FOLD=$tc FOLD_SKIP=$skip" >>"$f"
			REPLAYSSM_CUDA_DEFINES="-DTC_FOLD=$tc -DFOLD_SKIP=$skip" "$cli" bench kernels --device cuda --batch 256 \
				--shapes qwen3.5-4b --state-dtype fp32,bf16 --modes replay --min-time 30ms 2>&1 | grep -v '^device' >>"$f"
		done
	done
	echo "experiment fold_phases: $f"
	grep -E '^==|replay ' "$f"
	;;
profile_b1)
	# Where a batch-1 verify spends its time (NOTES.md, session 15, Next 1):
	# ncu of the small verifies (the regexes match the early kernels the
	# batch takes), a device call of its own.
	NCU_EXTRA="--warp-sampling-interval 0" profile nano_verify_b1 mamba2_replay_verify_small \
		--shapes nemotron-3-nano-4b --state-dtype fp32 --modes verify --batch 1
	NCU_EXTRA="--warp-sampling-interval 0" profile gdn_verify_b1 gdn_replay_verify \
		--shapes qwen3.5-4b --state-dtype fp32 --modes verify --batch 1
	;;
profile_nonflush)
	# Where the GDN non-flush step spends its time (session 20): ncu of
	# gdn_group_step with an nvfp4 read copy (bf16 checkpoint) and with a
	# plain fp32 checkpoint, Qwen3.5-4B, batch 256; then the nvfp4 step's
	# passes in flight (GPF) and its stream alone (GROUP_NODOTS).
	profile nvfp4_step gdn_group_step --shapes qwen3.5-4b --state-dtype bf16 --modes replay-nvfp4 --batch 256
	profile fp32_step gdn_group_step --shapes qwen3.5-4b --state-dtype fp32 --modes replay --batch 256
	experiment nvfp4_gpf qwen3.5-4b replay-nvfp4 REPLAYSSM_CUDA_DEFINES=-DGPF=6 REPLAYSSM_CUDA_DEFINES=-DGPF=24 \
		REPLAYSSM_CUDA_DEFINES=-DGROUP_NODOTS=1 REPLAYSSM_CUDA_GROUP_THREADS=128
	;;
nvfp4_gpf)
	# The nvfp4 read copy's group step by passes in flight (GPF; 12 had
	# 16% of GDN's stall samples on instruction fetch, ncu session 20, and
	# GDN now takes 4, Mamba-2 12): every shape against the defaults.
	experiment nvfp4_gpf all replay-nvfp4 REPLAYSSM_CUDA_DEFINES=-DGPF=3 REPLAYSSM_CUDA_DEFINES=-DGPF=4 \
		REPLAYSSM_CUDA_DEFINES=-DGPF=6 REPLAYSSM_CUDA_DEFINES=-DGPF=8
	;;
group_tc)
	# The GDN nvfp4 group step's dots on the tensor cores (GROUP_TC,
	# session 21): the GDN replay tests, then every GDN replay mode against
	# the FMA stream (GROUP_TC=0), and ncu of the nvfp4 step.
	some_tests group_tc 420 \
		'TestReplayPipelineMatchesV4/gdn|TestReplayOverlapMatchesSerial/gdn|TestReplayReadCopyErrorDoesNotCompound/gdn/nvfp4|TestReplayCacheSpeculative/gdn|TestReplayCacheMatchesReference/gdn|TestReplayStepSmallMatchesSplit//gdn/nvfp4'
	experiment group_tc gdn replay,replay-nvfp4,replay-fp8 REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=0
	profile nvfp4_tc gdn_group_step --shapes qwen3.5-4b --state-dtype bf16 --modes replay-nvfp4 --batch 256
	;;
group_occ)
	# The GDN group step's items in flight: strips in flight (GTPF), more
	# blocks an SM (GMINB) with fewer ring u entries staged in shared
	# memory (REPLAYSSM_CUDA_GROUP_STAGED), bf16 checkpoints.
	DTYPES=bf16 experiment group_occ gdn replay,replay-nvfp4 REPLAYSSM_CUDA_DEFINES=-DGTPF=4 \
		REPLAYSSM_CUDA_DEFINES=-DGTPF=8 "REPLAYSSM_CUDA_DEFINES=-DGMINB=10 REPLAYSSM_CUDA_GROUP_STAGED=8" \
		"REPLAYSSM_CUDA_DEFINES=-DGMINB=12 REPLAYSSM_CUDA_GROUP_STAGED=5" \
		"REPLAYSSM_CUDA_DEFINES=-DGMINB=5 REPLAYSSM_CUDA_GROUP_STAGED=7"
	;;
group_final)
	# Session 21's close: the replay tests the group_tc target leaves out,
	# then the GDN rows of the batch-256 table.
	some_tests final 300 \
		'TestReplayStepSmallMatchesSplit|TestReplayFoldCachedReadsRing|TestReplayVerifyEarlyMatchesLate|TestReplayKernelResources|TestReplayPipelinePlanOnDevice|TestReplayCacheGraph|TestReplayFoldPipeMatchesItems/gdn'
	SHAPES=gdn bench 256 b256_gdn.jsonl
	;;
group_tc2)
	# The tensor-core nvfp4 stream in both layers' group steps (session
	# 21): the nvfp4 cases of the replay tests, then both layers' nvfp4 and
	# replay non-flush steps against GROUP_TC=0 (bf16 checkpoints).
	some_tests group_tc2 200 \
		'TestReplayPipelineMatchesV4/.*/nvfp4|TestReplayOverlapMatchesSerial/.*/nvfp4|TestReplayCacheMatchesReference/.*/replay/nvfp4|TestReplayCacheSpeculative/.*/nvfp4|TestReplayStepSmallMatchesSplit//.*/nvfp4|TestReplayCacheGraph|TestReplayGroupTCScales'
	DTYPES=bf16 experiment group_tc2 all replay,replay-nvfp4 REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=0
	;;
gdn_pf)
	# GDN_PF=1 (written in session 21, not yet run): the GDN group step's
	# items in one loop, each asking for the next one's cursor, first raw
	# loads and k, q during its output loop. Its tests, then against the
	# defaults.
	REPLAYSSM_CUDA_DEFINES=-DGDN_PF=1 some_tests gdn_pf 400 \
		'TestReplayPipelineMatchesV4/gdn|TestReplayOverlapMatchesSerial/gdn|TestReplayCacheSpeculative/gdn|TestReplayCacheMatchesReference/gdn/replay|TestReplayFoldCachedReadsRing'
	experiment gdn_pf gdn replay,replay-nvfp4 REPLAYSSM_CUDA_DEFINES=-DGDN_PF=1
	;;
group_tc_bf16)
	# GROUP_TC=1 for bf16 matrices read as stored (written in session 21,
	# not yet run): the bf16 replay tests under it, then the bf16 replay
	# step against the defaults, and with four passes in flight.
	REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=1 some_tests group_tc_bf16 400 \
		'TestReplayPipelineMatchesV4/.*/bf16|TestReplayCacheMatchesReference/.*/replay/bf16|TestReplayCacheSpeculative/.*/replay-bf16|TestReplayOverlapMatchesSerial'
	DTYPES=bf16 experiment group_tc_bf16 all replay REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=1 \
		"REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=1 -DGTPF=4"
	;;
verify_tc)
	# The GDN group verify's stream on the tensor cores (VERIFY_TC,
	# session 22; nvfp4 read copies and bf16 matrices): the GDN verify
	# tests, then the bf16 verify against VERIFY_TC=0, and the 122B group
	# step at five blocks an SM (GMINB=5; its registers grew 92 -> 106 with
	# session 21's vector scaling, leaving four).
	some_tests verify_tc 300 \
		'TestReplayPipelineMatchesV4/gdn/(bf16|fp32\+nvfp4|fp32\+bf16)|TestReplayCacheSpeculative/gdn|TestReplayVerifyEarlyMatchesLate/gdn|TestReplayCacheMatchesReference/gdn/replay/(bf16|nvfp4)'
	DTYPES=bf16 experiment verify_tc gdn verify REPLAYSSM_CUDA_DEFINES=-DVERIFY_TC=0
	experiment gminb qwen3.5-122b replay,replay-nvfp4,replay-fp8 REPLAYSSM_CUDA_DEFINES=-DGMINB=5
	;;
verify_tc2)
	# Session 22's second call: Mamba-2's group verify on the tensor cores
	# too, GMINB=5 for the 122B step with a read copy; their tests, both
	# layers' bf16 verify against VERIFY_TC=0, then the batch-256 table.
	some_tests verify_tc2 240 \
		'TestReplayPipelineMatchesV4/mamba2/(bf16|fp32\+nvfp4|fp32\+bf16)|TestReplayCacheSpeculative/mamba2|TestReplayVerifyEarlyMatchesLate/mamba2|TestReplayCacheMatchesReference/mamba2/replay/(bf16|nvfp4)|TestReplayPipelineMatchesV4/gdn/(fp32\+nvfp4|e4m3|fp16\+e4m3)/v6/threads=128'
	DTYPES=bf16 experiment verify_tc2 all verify REPLAYSSM_CUDA_DEFINES=-DVERIFY_TC=0
	bench 256 b256.jsonl
	;;
verify_pf)
	# The tensor-core verify's passes in flight (GVPF, 2 by default), bf16.
	DTYPES=bf16 experiment verify_pf qwen3.5-4b,nemotron-3-nano-4b verify REPLAYSSM_CUDA_DEFINES=-DGVPF=4 \
		REPLAYSSM_CUDA_DEFINES=-DGVPF=8
	;;
e4m3_tc)
	# The e4m3 tensor-core streams (GT_E4M3, session 22, written after its
	# device time; asked for): the e4m3 replay tests of both layers under
	# -DGROUP_TC=1 -DVERIFY_TC=1, then the fp8 read copy's step against
	# its FMA stream.
	REPLAYSSM_CUDA_DEFINES="-DGROUP_TC=1 -DVERIFY_TC=1" some_tests e4m3_tc 300 \
		"$e4m3_tests"
	DTYPES=fp32,bf16 experiment e4m3_tc all replay-fp8 REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=1
	;;
e4m3_default)
	# Session 23: the e4m3 streams on the tensor cores by default. Their
	# tests under the defaults; the fp8 read copy's verify (verify-fp8)
	# and an fp8 checkpoint's step and verify against the FMA streams; the
	# verify by part (GV_SKIP leaves out 4 the early folds, 1 the stream,
	# 2 the epilogue; the outputs are then wrong). In Mamba-2's verify bit 2
	# takes the stream out too and bit 4 does nothing (session 23).
	some_tests e4m3 300 \
		"$e4m3_tests"
	DTYPES=fp32,bf16 experiment verify_fp8 all verify-baseline,verify-fp8 REPLAYSSM_CUDA_DEFINES=-DVERIFY_TC=0
	DTYPES=fp8 experiment fp8_state all baseline,replay,verify-baseline,verify "REPLAYSSM_CUDA_DEFINES=-DGROUP_TC=0 -DVERIFY_TC=0"
	experiment gv_skip all verify REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=4 REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=1 \
		REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=2
	;;
fold_stream)
	# Session 24: the GDN verify's streamed early folds (gdn_fold_stream)
	# and its ring weights once an item. The tests that compare the stream
	# with gdn_replay_fold_items and v4 bit for bit and the GDN references;
	# the verify against the old folds, its items' warps and the verify
	# without its folds (GV_SKIP=4: the folds' time by difference).
	some_tests fold_stream 300 \
		'TestReplayFoldStreamMatchesItems|TestReplayPipelineMatchesV4/gdn|TestReplayCacheSpeculative/gdn|TestReplayCacheMatchesReference/gdn'
	experiment fold_stream qwen3.5-4b,qwen3.5-122b verify REPLAYSSM_CUDA_FOLD_STREAM=0 \
		REPLAYSSM_CUDA_FS_WARPS=2 REPLAYSSM_CUDA_FS_WARPS=8 REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=4
	;;
flush_stream)
	# Sessions 24-25: the GDN flush by strips (gdn_flush_stream, the
	# default where it applies, one buffer: FS_DB's second measured no
	# faster): its bit-for-bit tests against gdn_replay_flush, the
	# streamed verify folds' and the overlap's, the step against
	# gdn_replay_flush (_FLUSH_STREAM=0) and on two blocks an SM beside
	# the non-flush step (_OVERLAP_BLOCKS=264), then ncu of its aligned
	# flush (the 16th launch: 15 empty ones in the non-flush graph before
	# it).
	some_tests flush_stream 300 'TestReplayFlushStreamMatchesItems|TestReplayFoldStreamMatchesItems|TestReplayOverlapMatchesSerial'
	experiment flush_stream qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_FLUSH_STREAM=0 REPLAYSSM_CUDA_OVERLAP_BLOCKS=264
	for st in bf16 fp32; do
		LAUNCH_SKIP=15 profile "flush_stream_$st" gdn_flush_stream --shapes qwen3.5-4b --state-dtype "$st" --modes replay --batch 256
	done
	;;
flush_warps)
	# Session 26, run first in session 27: the streamed flush's own warps
	# (FL_WARPS: 8 for 2-byte checkpoints, the early folds keep 4; the
	# split was written after the device time, each kernel's SASS that of a
	# measured configuration, ptxas 11.8): the stream tests, then bf16
	# replay and verify against REPLAYSSM_CUDA_FL_WARPS=4.
	some_tests flush_warps 200 'TestReplayFlushStreamMatchesItems|TestReplayFoldStreamMatchesItems|TestReplayOverlapMatchesSerial'
	DTYPES=bf16 experiment flush_warps qwen3.5-4b,qwen3.5-122b replay,verify REPLAYSSM_CUDA_FL_WARPS=4
	;;
fl_pad)
	# Session 28's defaults, set after its device time from its same-run
	# comparisons (each measured alone, not together): the flush's padded
	# shared rows for 2-byte checkpoints beside 64-thread group steps
	# (FL_PAD; Qwen3.5-4B bf16 window 120 -> 113 us) and an fp32 group
	# step of 64-thread blocks staging six ring entries (gdnStaged64; 4B
	# fp32 window 184 -> 177). The stream tests, replay against each
	# setting undone (and FL_PAD forced on for 122B), then the batch-256
	# table.
	some_tests fl_pad 300 'TestReplayFlushStreamMatchesItems|TestReplayFoldStreamMatchesItems|TestReplayOverlapMatchesSerial|TestReplayCacheMatchesReference/gdn'
	experiment fl_pad qwen3.5-4b,qwen3.5-122b replay,verify REPLAYSSM_CUDA_FL_PAD=0 REPLAYSSM_CUDA_FL_PAD=1 REPLAYSSM_CUDA_GROUP_STAGED=14
	# The side stream at the default priority (REPLAYSSM_CUDA_OVERLAP_PRIORITY,
	# written after session 28's device time): whether the empty flush's
	# blocks, started second, stop costing the non-flush step, and then
	# whether 122B takes the padded flush too.
	experiment prio qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_PRIORITY=0 "REPLAYSSM_CUDA_OVERLAP_PRIORITY=0 REPLAYSSM_CUDA_FL_PAD=1"
	bench 256 b256.jsonl
	;;
trace)
	# Session 29: the GDN step's and verify's block timelines (kernels built
	# with -DTRACE=1 record each block's start, end, SM and items; `bench
	# kernels --trace` writes one CSV a graph). The trace test first, then
	# the batch-256 rows of both Qwen3.5 shapes (the aligned non-flush and
	# flush graphs, the staggered window, a verify round), their summaries
	# (tools/trace_summary.py) and the CSVs in one archive.
	some_tests trace 200 'TestReplayTrace'
	REPLAYSSM_CUDA_DEFINES="-DTRACE=1 ${REPLAYSSM_CUDA_DEFINES:-}" "$cli" bench kernels --device cuda --batch "${BATCH:-256}" \
		--shapes "${SHAPES:-qwen3.5-4b,qwen3.5-122b}" --state-dtype "${DTYPES:-fp32,bf16}" --modes "${MODES:-replay,verify}" \
		--min-time 30ms --trace "$out/trace" >"$out/trace_bench.txt" 2>&1
	echo "trace bench: exit $?"
	grep -v '^device' "$out/trace_bench.txt"
	python3 tools/trace_summary.py "$out/trace" >"$out/trace_summary.txt" 2>&1
	tar czf "$out/traces.tgz" -C "$out" trace && rm -rf "$out/trace"
	echo "trace summary: $out/trace_summary.txt"
	;;
order)
	# Session 29: the block timelines (`trace`) showed the staggered step's
	# flush, queued first at the greatest priority, holding every SM for the
	# step's first 18-43 us before the group step's first block; the one
	# step a window whose group step started first was 3-6% shorter.
	# REPLAYSSM_CUDA_OVERLAP_ORDER=main queues the non-flush kernel first:
	# the overlap tests under it, replay against the defaults (and with the
	# side stream at the default priority, and 122B bf16 with the padded
	# flush), batches 64 and 512, then its timelines.
	some_tests order 300 'TestReplayOverlapMatchesSerial|TestReplayCacheGraph'
	experiment order qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main \
		"REPLAYSSM_CUDA_OVERLAP_ORDER=main REPLAYSSM_CUDA_OVERLAP_PRIORITY=0" "REPLAYSSM_CUDA_OVERLAP_ORDER=main REPLAYSSM_CUDA_FL_PAD=1" ""
	BATCH=512 experiment order512 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main
	BATCH=64 experiment order64 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main
	REPLAYSSM_CUDA_OVERLAP_ORDER=main MODES=replay tools/gpu_check.sh trace
	;;
queue)
	# Session 29, after `order`: OVERLAP_ORDER=main took the 4B bf16
	# non-flush step 99.3 -> 95.4 us, but the aligned flush 271 -> 411 (the
	# flush's blocks, started behind the group step's, took their items by
	# block index: its last blocks began ~380 us after its first). FL_QUEUE
	# (now on with ORDER=main) takes them from a counter. The stream and
	# overlap tests, replay against the defaults at 256, 512 and 64, the
	# timelines.
	some_tests queue 300 'TestReplayFlushStreamMatchesItems|TestReplayOverlapMatchesSerial|TestReplayCacheGraph|TestReplayCacheMatchesReference/gdn'
	experiment queue qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main REPLAYSSM_CUDA_FL_QUEUE=1 ""
	BATCH=512 experiment queue512 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main
	BATCH=64 experiment queue64 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_ORDER=main
	REPLAYSSM_CUDA_OVERLAP_ORDER=main MODES=replay tools/gpu_check.sh trace
	;;
few)
	# Session 29's last default, set after its device time from a same-run
	# comparison at B=256 (FL_FEW=4 against off: 4B fp32 window 177 -> 174
	# us, 122B fp32 319 -> 314), then bounded to batches from 256 and to
	# fp32 checkpoints (bf16's flush spills under it): the stream, overlap,
	# graph and GDN reference tests, replay against REPLAYSSM_CUDA_FL_FEW=0
	# at 256, 512 and 64 (and bf16 with FL_FEW=4 once more), then the
	# batch-256 table.
	some_tests few 300 'TestReplayFlushStreamMatchesItems|TestReplayOverlapMatchesSerial|TestReplayCacheGraph|TestReplayCacheMatchesReference/gdn|TestReplayTrace'
	experiment few qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_FL_FEW=0 REPLAYSSM_CUDA_FL_FEW=4 ""
	BATCH=512 experiment few512 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_FL_FEW=0
	BATCH=64 experiment few64 qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_FL_FEW=0
	bench 256 b256.jsonl
	;;
m2overlap)
	# Session 31. Mamba-2's flush beside the step (REPLAYSSM_CUDA_OVERLAP=1,
	# off by default) ran Super's windows 3.5-5.5% faster at B=256 and 512
	# but Nano's 1-3.5% slower, its non-flush step 273 -> 288 us (fp32):
	# against the defaults, then the Nano fp32 timelines under it (the
	# group step's static item order, -DM2_GQUEUE=0, was slower and is gone).
	experiment m2ov mamba2 replay REPLAYSSM_CUDA_OVERLAP=1
	REPLAYSSM_CUDA_OVERLAP=1 REPLAYSSM_CUDA_DEFINES="-DTRACE=1" "$cli" bench kernels --device cuda \
		--batch 256 --shapes nemotron-3-nano-4b --state-dtype fp32 --modes replay --min-time 30ms --trace "$out/trace" \
		>"$out/trace_bench.txt" 2>&1
	python3 tools/trace_summary.py "$out/trace" >"$out/trace_summary.txt" 2>&1
	rm -rf "$out/trace"
	grep -E "^==|whole graph" "$out/trace_summary.txt"
	;;
m2tc)
	# Session 31, written after its device time. The Mamba-2 pipelined
	# folds' rank update on the tensor cores (REPLAYSSM_CUDA_M2_TC_FOLD=1,
	# M2_TC_FOLD: Nano's 80 rows on 5 warps, Super's 64 on 8 in two column
	# parts): the fold-pipe tests (a "tc" case against the items kernels,
	# fp32, to sameBound, both layouts), the reference test's "/m2tc"
	# cases (every format, Nano's layout) and the speculative tests with it,
	# then replay and verify against the defaults, ncu of the Nano bf16
	# aligned flush under it, and the Mamba-2 rows of the batch-256 table
	# (Next 0: call 4 of session 31 predates PIPE_LANES=2).
	some_tests m2tc 300 'TestReplayFoldPipeMatchesItems'
	some_tests m2tc_ref 300 'TestReplayCacheMatchesReference/mamba2-H4P80/replay.*/.*/m2tc'
	REPLAYSSM_CUDA_M2_TC_FOLD=1 some_tests m2tc_spec 300 'TestReplayCacheSpeculative/mamba2'
	experiment m2tc mamba2 replay,verify REPLAYSSM_CUDA_M2_TC_FOLD=1
	LAUNCH_SKIP=15 REPLAYSSM_CUDA_M2_TC_FOLD=1 profile m2tc_flush mamba2_flush_pipe --batch 256 \
		--shapes nemotron-3-nano-4b --state-dtype bf16 --modes replay
	SHAPES=mamba2 bench 256 b256_m2.jsonl
	;;
m2default)
	# Session 32: the tensor-core fold by default (mamba2TCDefault: 2-byte
	# and fp8 checkpoints, fp32 where the warps take whole rows) against
	# =0, fp32, bf16 and e4m3, then the Mamba-2 rows of the batch-256 table.
	DTYPES=fp32,bf16,fp8-e4m3 experiment m2default mamba2 replay,verify REPLAYSSM_CUDA_M2_TC_FOLD=0
	SHAPES=mamba2 bench 256 b256_m2.jsonl
	;;
fp8enc)
	# Session 32: e4m3 encoded by the hardware conversion (FP8_ENC_CVT; ncu
	# of the Nano fp8 aligned flush had the software encoder a fifth of
	# its stall samples). The codec test against numeric, the e4m3 tests,
	# then fp8 checkpoints and fp8 read copies against =0.
	some_tests codecs 120 'TestReplayCodecs'
	some_tests fp8enc 300 "$e4m3_tests"
	DTYPES=fp8-e4m3,bf16 experiment fp8enc nemotron-3-nano-4b,qwen3.5-4b replay,verify,replay-fp8 REPLAYSSM_CUDA_DEFINES=-DFP8_ENC_CVT=0
	;;
m2srot)
	# Session 32, written after its device time: first, the codec test as
	# changed (a NaN code of either sign), then the tensor-core fold's
	# checkpoint read with each row's chunks rotated (M2_TC_SROT: the 8
	# rows of a warp's TCMap load on distinct banks) against the defaults,
	# and Super fp32 forced onto the tensor cores with it (FMA by default:
	# 654 -> 675 us without). Then `tools/gpu_check.sh bench256` for both
	# layers' tables (their fp8 read-copy columns predate FP8_ENC_CVT).
	some_tests codecs 120 'TestReplayCodecs'
	some_tests m2srot 300 'TestReplayFoldPipeMatchesItems/tc'
	some_tests m2srot_ref 300 'TestReplayCacheMatchesReference/mamba2-H4P80/replay.*/.*/m2tc-srot'
	DTYPES=fp32,bf16,fp8-e4m3 experiment m2srot mamba2 replay,verify REPLAYSSM_CUDA_DEFINES=-DM2_TC_SROT=1 \
		"REPLAYSSM_CUDA_M2_TC_FOLD=1 REPLAYSSM_CUDA_DEFINES=-DM2_TC_SROT=1" REPLAYSSM_CUDA_M2_TC_FOLD=1
	;;
nansel)
	# Session 33: ncu of the Nano fp8 aligned flush had instruction-fetch
	# stalls (no_inst) on the e4m3 encoder's NaN branch 14% of its samples:
	# the software encoder inline once a pair. As run, NAN_SELECT=1 (the
	# default then) put the NaN codes in by selects, since removed; the
	# defaults are now NAN_SELECT=2 (the conversion's own code); =0 is
	# session 32's branch. (This call ran past 600 s: run its tests alone.)
	some_tests nansel 330 'TestReplayCodecs|TestReplayFoldPipeMatchesItems|TestReplayPipelineMatchesV4|TestReplayReadCopyErrorDoesNotCompound|TestReplayCacheMatchesReference'
	DTYPES=bf16,fp8-e4m3 experiment nansel nemotron-3-nano-4b,nemotron-3-super,qwen3.5-4b replay,verify,replay-fp8 REPLAYSSM_CUDA_DEFINES=-DNAN_SELECT=0
	;;
nansel2)
	# Session 33, after nansel (selects: Nano fp8 flush 558 -> 503 us,
	# Super fp8 531 -> 620; bf16 slower, back to its branch): the codec
	# test with the conversion's own NaN (NAN_SELECT=2), then the three
	# settings on fp8 checkpoints.
	REPLAYSSM_CUDA_DEFINES=-DNAN_SELECT=2 some_tests nansel2 120 'TestReplayCodecs'
	DTYPES=fp8-e4m3 experiment nansel2 nemotron-3-nano-4b,nemotron-3-super,qwen3.5-4b replay,verify \
		REPLAYSSM_CUDA_DEFINES=-DNAN_SELECT=0 REPLAYSSM_CUDA_DEFINES=-DNAN_SELECT=2
	;;
readcopy)
	# Session 33, written after its device time: TestReplayReadCopyIsNumerics
	# (new: each flush's read copy against package numeric's encoding of
	# its checkpoint, byte for byte) with the defaults, then under
	# NV_QDIV=1 (nvfp4 quotients from one reciprocal a chunk, off); the
	# codec test's NaN codes; then NV_QDIV against the defaults on every
	# shape's nvfp4 rows; ncu of the Nano nvfp4 flush.
	# Then `tools/gpu_check.sh tests` (the whole package has not run under
	# NAN_SELECT=2 and M2_TC_SROT).
	some_tests readcopy 200 'TestReplayReadCopyIsNumerics'
	REPLAYSSM_CUDA_DEFINES=-DNV_QDIV=1 some_tests readcopy_qdiv 200 'TestReplayReadCopyIsNumerics'
	# Which NaN code the e4m3 conversion gives (NAN_SELECT=2's premise).
	some_tests codecs 120 'TestReplayCodecs'
	grep 'NaN inputs' "$out/tests_codecs.log"
	experiment qdiv all replay-nvfp4,verify-nvfp4 REPLAYSSM_CUDA_DEFINES=-DNV_QDIV=1
	# The nvfp4 flush (Nano fp32 1423 us against the plain flush's 607):
	# where its time goes, with the defaults (check its Duration: the
	# 16th launch should be the first aligned flush).
	LAUNCH_SKIP=15 profile nvfp4flush mamba2_replay_flush --batch 256 --shapes nemotron-3-nano-4b --state-dtype fp32 --modes replay-nvfp4
	;;
nvpipe)
	# Session 34, written after its device time (run `tests` first: the
	# whole package has not run under NV_QDIV=1 and BF16_NAN_BRANCH=0, nor
	# the read-copy test's new non-finite cases). The nvfp4 flush: the
	# read-copy test under the lean quantiser (NV_LEAN) and with the
	# Mamba-2 nvfp4 flush on the pipelined fold (FOLDS=pipe; it lost in
	# session 11, 2320 against 1521 us, before the tensor-core folds; its
	# planned registers now let bf16 + nvfp4 run two blocks an SM); then
	# both against the defaults on the nvfp4 rows; then docs/PERF.md's
	# batch-256 table under session 34's defaults.
	REPLAYSSM_CUDA_DEFINES=-DNV_LEAN=1 some_tests readcopy_lean 200 'TestReplayReadCopyIsNumerics'
	REPLAYSSM_CUDA_FOLDS=pipe some_tests readcopy_pipe 200 'TestReplayReadCopyIsNumerics/mamba2'
	experiment nvpipe all replay-nvfp4,verify-nvfp4 REPLAYSSM_CUDA_DEFINES=-DNV_LEAN=1 REPLAYSSM_CUDA_FOLDS=pipe
	bench 256 b256.jsonl
	;;
ring)
	# Session 35, written without a GPU (first run clean in session 36):
	# the Mamba-2 bf16 ring (RING_BF16). Its metamorphic
	# test against an fp32 ring fed rounded inputs (bit for bit: the small,
	# group and v4 paths, the items and the pipelined folds), the codec test
	# (round_bf16 against numeric), the refusals; the bf16-ring cases of
	# the reference, speculative and graph tests (a -test.run pattern splits
	# at every slash, so one call each). Then `ringbench`.
	some_tests ring 300 'TestReplayRingBF16IsRoundedInputs|TestReplayCodecs|TestReplayRingRefusals'
	some_tests ring_ref 120 'TestReplayCacheMatchesReference/mamba2/replay/.*/bf16-ring'
	some_tests ring_spec 120 'TestReplayCacheSpeculative/mamba2/bf16-ring'
	some_tests ring_graph 60 'TestReplayCacheGraph/mamba2/.*/bf16-ring'
	;;
ringbench | ringitems)
	# The Mamba-2 rows at batch 256 with an fp32 ring and with a bf16 one
	# in the same call: ringbench on the pipelined folds (the default; with
	# a bf16 ring their producer widens the rows through registers,
	# Piece.widen), ringitems on the items flush (REPLAYSSM_CUDA_FOLDS=items:
	# whether the producer's widening holds the folds back).
	folds=
	[[ $1 == ringitems ]] && folds=items
	for r in fp32 bf16; do
		REPLAYSSM_CUDA_FOLDS=$folds "$cli" bench kernels --device cuda \
			--batch 256 --shapes mamba2 --state-dtype fp32,bf16 --ring-dtype "$r" \
			--modes baseline,replay,replay-nvfp4,verify-baseline,verify,verify-nvfp4 --min-time 30ms --json \
			>"$out/$1_$r.jsonl" 2>"$out/$1_$r.err"
		echo "== $1 ring $r: exit $?"
		tail -3 "$out/$1_$r.err"
		python3 tools/perf_table.py --wide "$out/$1_$r.jsonl"
	done
	;;
tests_rest)
	# What `tests` leaves out but the ring and GROUP_EARLY tests (`ring`,
	# `early`): the package's last tests.
	some_tests rest 300 "^($tests_rest)\$"
	;;
early)
	# Session 36: the Mamba-2 group step asks for an item's per-token
	# inputs (B row, dt, dt_bias, A, D) by cp.async before its stream
	# (GROUP_EARLY, the default since) instead of loading each where it is
	# used. Bit for bit against GROUP_EARLY=0; the ring and reference tests
	# under the old setting (REPLAYSSM_CUDA_DEFINES reaches every cache the
	# tests build). The rows against GROUP_EARLY=0 are `earlybench`, a call
	# of their own.
	some_tests early 200 'TestReplayGroupEarlyMatches'
	REPLAYSSM_CUDA_DEFINES=-DGROUP_EARLY=0 some_tests early_ref 200 'TestReplayCacheMatchesReference/mamba2/replay'
	REPLAYSSM_CUDA_DEFINES=-DGROUP_EARLY=0 some_tests early_ring 200 'TestReplayRingBF16IsRoundedInputs'
	;;
vfolddots)
	# Session 37 wrote it, 38 measured it (H100: fp32 verify 9-11% faster)
	# and made it the default for Mamba-2 fp32 checkpoints: a verify's
	# early folds form the folding slots' drafts' dots for the group
	# verify. =1 takes Mamba-2 bf16 and fp16 checkpoints too (the dots from
	# S' rounded as stored) and GDN's streamed folds (gdn_fold_stream: S'^T
	# k_d to ringU, S'^T q_d to o), both written in session 38 without a
	# GPU. The fold tests (each against the items kernels; their "fold
	# dots" cases ask for it themselves) and the reference and speculative
	# tests under =1, then the rows with it off and on (the Mamba-2 fold's
	# stage holds the drafts' C rows: the flush's stages too).
	REPLAYSSM_CUDA_VFOLD_DOTS=1 some_tests vdots 300 'TestReplayFoldPipeMatchesItems|TestReplayFoldStreamMatchesItems|TestReplayCacheMatchesReference|TestReplayCacheSpeculative'
	DTYPES=fp32,bf16 experiment vdots mamba2 replay,verify REPLAYSSM_CUDA_VFOLD_DOTS=0 REPLAYSSM_CUDA_VFOLD_DOTS=1
	DTYPES=fp32,bf16 experiment gdnvdots gdn verify REPLAYSSM_CUDA_VFOLD_DOTS=1
	;;
step_own)
	# Session 39, written without a GPU: the small step's last block moves
	# its own batch row's cursor from the slot and cursor its block read at
	# its start (no load: a batch-1 step's tail without the slots -> hist
	# round trips), the other rows' with every slot, then every cursor,
	# asked for at once (STEP_OWN=1). The small step's tests under it (its
	# cursors decide every later step's outputs), then batches 1 and 4
	# against the defaults.
	REPLAYSSM_CUDA_DEFINES=-DSTEP_OWN=1 some_tests step_own 300 'TestReplayStepSmallMatchesSplit|TestReplayCacheMatchesReference|TestReplayCacheSpeculative'
	BATCH=1 experiment step_own1 all replay REPLAYSSM_CUDA_DEFINES=-DSTEP_OWN=1
	BATCH=4 experiment step_own4 all replay REPLAYSSM_CUDA_DEFINES=-DSTEP_OWN=1
	;;
earlybench)
	experiment early mamba2 replay,replay-nvfp4,verify REPLAYSSM_CUDA_DEFINES=-DGROUP_EARLY=0
	BATCH=64 experiment early64 mamba2 replay,verify REPLAYSSM_CUDA_DEFINES=-DGROUP_EARLY=0
	;;
m2stages)
	# Session 33, written after its device time: ncu of the Nano fp8
	# aligned flush had the consumers' wait for a stage (mbar_wait's
	# try_wait, long scoreboard) 8.5% of its samples, DRAM 25% busy. The
	# fp8 stage is ~28 KB (the ring's fp32 x and B rows two thirds of it),
	# three stages and two blocks an SM by default: more stages in flight.
	DTYPES=fp8-e4m3,bf16 experiment m2stages mamba2 replay,verify REPLAYSSM_CUDA_FOLD_STAGES=4 REPLAYSSM_CUDA_FOLD_STAGES=2
	;;
bf16nan)
	# Session 33, written after its device time: the bf16 pair
	# conversion without its NaN branch (BF16_NAN_BRANCH=0: a NaN stored
	# as the conversion makes it) in every bf16 store, the baselines'
	# included (gdn_baseline_step 1680 -> 1376 instructions): the codec
	# test under it (it logs the codes NaNs get), then the bf16 rows.
	REPLAYSSM_CUDA_DEFINES=-DBF16_NAN_BRANCH=0 some_tests codecs_bf16nan 120 'TestReplayCodecs'
	grep 'NaN inputs' "$out/tests_codecs_bf16nan.log"
	DTYPES=bf16 experiment bf16nan all baseline,replay,verify-baseline,verify REPLAYSSM_CUDA_DEFINES=-DBF16_NAN_BRANCH=0
	;;
carveout)
	# Session 28: with the flush's padded rows (FL_PAD) the 122B bf16
	# non-flush step (its graph holds the empty flush beside it) ran 170 ->
	# 176 us, the 4B one not: whether the two kernels' shared-memory splits
	# differ (an SM changes its split only when idle). Replay against
	# REPLAYSSM_CUDA_CARVEOUT=100 (the group and stream kernels at the
	# largest split) with and without the padded rows.
	experiment carveout qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_FL_PAD=0 REPLAYSSM_CUDA_CARVEOUT=100 "REPLAYSSM_CUDA_CARVEOUT=100 REPLAYSSM_CUDA_FL_PAD=0"
	;;
l1)
	# Session 28: REPLAYSSM_CUDA_CARVEOUT=100 slowed the 122B non-flush
	# step (fp32 288 -> 299 us): whether the L1 left beside the shared
	# memory bounds the loads in flight. read_items with unused dynamic
	# shared memory (TestReadPatterns' smemKB rows), then the group steps
	# with fewer ring rows staged (REPLAYSSM_CUDA_GROUP_STAGED: less shared
	# memory a block, the rest read from global memory).
	"$test_bin" -test.v -test.run TestReadPatterns -test.timeout 200s >"$out/read_patterns.log" 2>&1
	echo "read patterns: exit $?"
	grep -E "read16|read_items|FAIL" "$out/read_patterns.log"
	experiment staged qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_GROUP_STAGED=2 REPLAYSSM_CUDA_GROUP_STAGED=6
	;;
read_sums)
	# Session 27: read_items with a group step's dots, row sums and shared
	# stores on its loads (ITEM_SUMS, TestReadPatterns' "sums 1/2" rows)
	# beside the loads alone, in contiguous warp loads and in the group
	# steps' row layouts (ITEM_LANES, written after session 27's device
	# time): whether the bf16 step's shape of passes or its rows' layout
	# holds it at ~71% of read16.
	"$test_bin" -test.v -test.run TestReadPatterns -test.timeout 200s >"$out/read_patterns.log" 2>&1
	echo "read patterns: exit $?"
	grep -E "read16|read_items|FAIL" "$out/read_patterns.log"
	;;
profile_stream)
	# Session 26's question for the next: the non-flush group step reads at
	# 80% of the read-only bandwidth, its access pattern alone (read_items)
	# at 94%, and neither its arithmetic nor an L2 prefetch nor staged bulk
	# copies moved it. ncu's memory sections of the 4B fp32 and bf16 steps
	# (DRAM and L2 traffic, sectors a request, L2 hit rates of the ring's
	# reads), and of read_items in the fp32 step's shape for comparison.
	mem="--section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats"
	for st in fp32 bf16; do
		NCU_SECTIONS=$mem profile "stream_$st" gdn_group_step --shapes qwen3.5-4b --state-dtype "$st" --modes replay --batch 256
	done
	ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
	# shellcheck disable=SC2086
	"$ncu" --clock-control none --kernel-name read_items --launch-skip 1 --launch-count 1 --section SpeedOfLight $mem \
		"$test_bin" -test.run TestReadPatterns >"$out/prof_read_items.txt" 2>&1
	echo "profile read_items: exit $?"
	grep -E "DRAM Throughput|L2 Hit|Mem Busy|Max Bandwidth|Duration" "$out/prof_read_items.txt" | head
	;;
l2pf)
	# Session 26: the flush's tables by its last warp, now the default (its
	# bit-for-bit tests), the read-only bandwidth (TestCopyBandwidth), then
	# the group streams' L2 prefetch (GROUP_L2PF passes ahead, a measuring
	# knob) and the stream alone (GROUP_NODOTS: how near the read-only
	# bandwidth the non-flush step's loads alone come), every shape.
	some_tests l2pf 300 'TestReplayFlushStreamMatchesItems|TestReplayOverlapMatchesSerial|TestCopyBandwidth|TestUtilityKernelsCompile'
	grep -E "MeasureBandwidth|read16" "$out/tests_l2pf.log" | head -4
	experiment l2pf all replay REPLAYSSM_CUDA_DEFINES=-DGROUP_L2PF=2 REPLAYSSM_CUDA_DEFINES=-DGROUP_L2PF=4 \
		REPLAYSSM_CUDA_DEFINES=-DGROUP_L2PF=8 REPLAYSSM_CUDA_DEFINES=-DGROUP_NODOTS=1 \
		"REPLAYSSM_CUDA_DEFINES=-DGROUP_NODOTS=1 -DGROUP_L2PF=4"
	DTYPES=fp32 experiment l2pf_verify all verify REPLAYSSM_CUDA_DEFINES=-DGROUP_L2PF=4
	;;
overlap_stream)
	# Session 25: the streamed flush beside the non-flush step on bounded
	# grids (_OVERLAP_BLOCKS), and a verify's streamed early folds beside
	# the group verify of the other slots (_VERIFY_OVERLAP=1).
	experiment overlap_stream qwen3.5-4b,qwen3.5-122b replay REPLAYSSM_CUDA_OVERLAP_BLOCKS=132 \
		REPLAYSSM_CUDA_OVERLAP_BLOCKS=264 REPLAYSSM_CUDA_OVERLAP_BLOCKS=396
	experiment verify_overlap qwen3.5-4b,qwen3.5-122b verify REPLAYSSM_CUDA_VERIFY_OVERLAP=1 \
		"REPLAYSSM_CUDA_VERIFY_OVERLAP=1 REPLAYSSM_CUDA_OVERLAP_BLOCKS=264"
	;;
experiments)
	experiment fold_stream qwen3.5-4b,qwen3.5-122b verify REPLAYSSM_CUDA_FOLD_STREAM=0
	experiment group_threads all replay,replay-nvfp4,replay-fp8 REPLAYSSM_CUDA_GROUP_THREADS=64 \
		REPLAYSSM_CUDA_GROUP_THREADS=128 REPLAYSSM_CUDA_GROUP_THREADS=256
	experiment v5 all replay,verify REPLAYSSM_CUDA_KERNELS=v5
	experiment nodots all replay,replay-nvfp4,replay-fp8 REPLAYSSM_CUDA_DEFINES=-DGROUP_NODOTS=1
	experiment fold_early all verify REPLAYSSM_CUDA_FOLD_ITEMS=0
	experiment load_first all verify REPLAYSSM_CUDA_DEFINES=-DLOAD_FIRST=0
	experiment base_early all baseline REPLAYSSM_CUDA_DEFINES=-DBASE_EARLY=0
	experiment folds all replay,replay-nvfp4,verify REPLAYSSM_CUDA_FOLDS=items REPLAYSSM_CUDA_FOLDS=pipe
	experiment base_threads all baseline,verify-baseline REPLAYSSM_CUDA_BASE_THREADS=128
	experiment base_stage all baseline,verify-baseline REPLAYSSM_CUDA_BASE_STAGE=0 \
		REPLAYSSM_CUDA_DEFINES=-DSTORE_V4=0 REPLAYSSM_CUDA_DEFINES=-DBASE_VPAD=0
	BATCH=1 experiment token_rows all replay REPLAYSSM_CUDA_DEFINES=-DTOKEN_ROWS=0
	BATCH=1 experiment head_split all replay REPLAYSSM_CUDA_HEAD_SPLIT=2 REPLAYSSM_CUDA_HEAD_SPLIT=4
	for b in 64 256; do
		BATCH=$b experiment "overlap$b" all replay,replay-nvfp4 REPLAYSSM_CUDA_OVERLAP=0 REPLAYSSM_CUDA_OVERLAP=1 \
			"REPLAYSSM_CUDA_OVERLAP=1 REPLAYSSM_CUDA_OVERLAP_BLOCKS=33"
		BATCH=$b experiment "verify_overlap$b" all verify REPLAYSSM_CUDA_VERIFY_OVERLAP=1
	done
	experiment gv_parts all verify REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=4 REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=5 \
		REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=6 REPLAYSSM_CUDA_DEFINES=-DGV_SKIP=7
	;;
*)
	sed -n '2,21p' "$0"
	exit 2
	;;
esac
