#!/bin/bash
# get_ptxas.sh: fetches ptxas (and cuobjdump) for TestReplayKernelSpills on a
# Debian machine without a CUDA toolkit, from Debian's non-free
# nvidia-cuda-toolkit package (CUDA 11.8, which assembles sm_90 but not the
# pipelined kernels' Hopper PTX), without installing it: the package is
# unpacked under ~/.cache/replayssm/ctk. The NVRTC the tests need comes from
# `apt-get install libnvrtc11.2 libnvrtc-builtins11.8` (libnvrtc.so must
# then point at libnvrtc.so.11.2). Prints the export that points the test
# at ptxas.
#
#   eval "$(tools/get_ptxas.sh)"
#   go test ./backend/cuda -run 'TestReplayKernelSpills' -v
set -euo pipefail
dir=${XDG_CACHE_HOME:-$HOME/.cache}/replayssm/ctk
if [ ! -x "$dir/usr/bin/ptxas" ]; then
	mkdir -p "$dir"
	policy=$(apt-cache policy nvidia-cuda-toolkit 2>/dev/null || true)
	if [[ "$policy" != *"Candidate: "[0-9]* ]]; then
		echo "nvidia-cuda-toolkit is not in the package lists: add the non-free component to /etc/apt/sources.list.d/debian.sources and run apt-get update" >&2
		exit 1
	fi
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download nvidia-cuda-toolkit >/dev/null 2>&1)
	dpkg -x "$tmp"/nvidia-cuda-toolkit_*.deb "$dir"
	rm -rf "$tmp"
fi
echo "export REPLAYSSM_PTXAS=$dir/usr/bin/ptxas"
