#!/bin/bash
# dump_modules.sh: the replay modules' PTX, ptxas report and SASS for a
# standard set of shapes and formats, without a GPU (TestDumpReplayModule
# in backend/cuda; needs NVRTC and ptxas: tools/get_ptxas.sh). For "did
# this change move the default kernels?": dump before and after, then
# tools/sass_diff.py each pair.
#
#   tools/dump_modules.sh OUTDIR [REPO]      # REPO: a checkout or worktree (default: this one)
#   git worktree add /tmp/base HEAD~3 && tools/dump_modules.sh /tmp/d0 /tmp/base
#   tools/dump_modules.sh /tmp/d1
#   for d in /tmp/d0/*/; do python3 tools/sass_diff.py $d/module.sass /tmp/d1/$(basename $d)/module.sass; done
#
# Each configuration goes to OUTDIR/SHAPE-STATE-READ-RING (module.cu,
# module.ptx, ptxas.txt, module.sass, log.txt). The environment's
# REPLAYSSM_CUDA_* knobs (REPLAYSSM_CUDA_DEFINES among them) reach every
# module; CONFIGS (lines of "shape state read ring") replaces the set.
set -u
out=${1:?usage: dump_modules.sh OUTDIR [REPO]}
repo=${2:-$(git rev-parse --show-toplevel)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -z ${REPLAYSSM_PTXAS:-} ]]; then
	eval "$("$repo/tools/get_ptxas.sh")" || exit 1
fi
configs=${CONFIGS:-"nemotron-3-nano-4b fp32 none fp32
nemotron-3-nano-4b bf16 nvfp4 fp32
nemotron-3-super fp8-e4m3 none fp32
nemotron-3-super fp32 bf16 fp32
nemotron-3-nano-4b fp32 none bf16
nemotron-3-nano-4b bf16 nvfp4 bf16
qwen3.5-4b fp32 none fp32
qwen3.5-4b bf16 nvfp4 fp32"}
rc=0
while read -r shape state read ring; do
	[[ -z $shape ]] && continue
	d="$out/$shape-$state-$read-$ring"
	mkdir -p "$d"
	# (REPLAYSSM_CUDA_RING_BF16=1: older revisions gate a bf16 ring behind
	# it, so that they dump the same modules.)
	(cd "$repo" && REPLAYSSM_CUDA_RING_BF16=1 REPLAYSSM_DUMP_DIR="$d" REPLAYSSM_DUMP_SHAPE="$shape" \
		REPLAYSSM_DUMP_STATE="$state" REPLAYSSM_DUMP_READ="$read" REPLAYSSM_DUMP_RING="$ring" \
		go test ./backend/cuda -run '^TestDumpReplayModule$' -count=1 >"$d/log.txt" 2>&1)
	r=$?
	[[ $r -ne 0 || ! -s $d/module.sass ]] && rc=1
	echo "$shape $state $read $ring: exit $r"
done <<<"$configs"
exit $rc
