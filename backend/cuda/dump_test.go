package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// TestDumpReplayModule is a tool for kernel work without a GPU, run by
// hand: it plans one replay module as the constructors would on an H200
// and writes its source, its PTX (NVRTC), an sm_90 assembly of it (ptxas
// -v: registers, spills, shared memory per kernel) and the SASS (cuobjdump) to
// $REPLAYSSM_DUMP_DIR. It skips unless that is set, and without NVRTC or
// ptxas (tools/get_ptxas.sh). The module is chosen by
//
//	REPLAYSSM_DUMP_SHAPE  nemotron-3-nano-4b (default), nemotron-3-super,
//	                      qwen3.5-4b or qwen3.5-122b (package bench's shapes)
//	REPLAYSSM_DUMP_STATE  fp32 (default), bf16, fp16, fp8-e4m3
//	REPLAYSSM_DUMP_READ   none (default), bf16, fp8-e4m3, nvfp4
//	REPLAYSSM_DUMP_MODE   replay (default) or baseline
//	REPLAYSSM_DUMP_RING   fp32 (default) or bf16 (replay.Options.Ring)
//
// (with REPLAYSSM_CUDA_HEAD_SPLIT, the small-batch module of split heads)
// and the REPLAYSSM_CUDA_* knobs. ptxas 11.8 does not know the Hopper
// forms the pipelined kernels use (mbarrier expect_tx, bulk copies, the
// mbarrier init fence): hopperCompat stands in older instructions of the
// same operands, so the report is an estimate for those kernels (session
// 11: Nano's first pipelined flush 135 registers here, 139 as the H200's
// NVRTC 13 built it; Qwen3.5-4B's 164 and 158) and exact for the others.
//
//	eval "$(tools/get_ptxas.sh)"
//	REPLAYSSM_DUMP_DIR=/tmp/m REPLAYSSM_DUMP_SHAPE=nemotron-3-nano-4b \
//	  go test ./backend/cuda -run TestDumpReplayModule -v
func TestDumpReplayModule(t *testing.T) {
	dir := os.Getenv("REPLAYSSM_DUMP_DIR")
	if dir == "" {
		t.Skip("REPLAYSSM_DUMP_DIR is not set (a tool run by hand)")
	}
	ptxas, n := assemblyTools(t)
	name := os.Getenv("REPLAYSSM_DUMP_SHAPE")
	if name == "" {
		name = "nemotron-3-nano-4b"
	}
	shapes := map[string]struct {
		layer string
		m2    ssm.Mamba2Shape
		gdn   ssm.GDNShape
	}{
		"nemotron-3-nano-4b": {"mamba2", nanoShape, ssm.GDNShape{}},
		"nemotron-3-super":   {"mamba2", superShape, ssm.GDNShape{}},
		"qwen3.5-4b":         {"gdn", ssm.Mamba2Shape{}, qwen4bShape},
		"qwen3.5-122b":       {"gdn", ssm.Mamba2Shape{}, qwen122bShape},
	}
	sh, ok := shapes[name]
	if !ok {
		t.Fatalf("unknown shape %q", name)
	}
	format := func(v, def string) numeric.Format {
		if v == "" {
			v = def
		}
		f, err := numeric.ParseFormat(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		return f
	}
	opt := replay.Options{Mode: replay.Replay, MaxDraft: 4, State: format(os.Getenv("REPLAYSSM_DUMP_STATE"), "fp32")}
	if r := os.Getenv("REPLAYSSM_DUMP_READ"); r != "" && r != "none" {
		opt.ReadCopy = format(r, "")
	}
	if os.Getenv("REPLAYSSM_DUMP_MODE") == "baseline" {
		opt.Mode = replay.Baseline
	}
	if r := os.Getenv("REPLAYSSM_DUMP_RING"); r != "" {
		opt.Ring = format(r, "fp32")
	}
	opt, err := replayDefaults(opt)
	if err != nil {
		t.Fatal(err)
	}
	tn := envTuning(os.Getenv)
	file, src, args, _, defines, err := replayModuleSource(h200Props(), sh.layer, sh.m2, sh.gdn, opt, tn, 8)
	if err != nil {
		t.Fatal(err)
	}
	// REPLAYSSM_CUDA_HEAD_SPLIT: the small-batch module of split heads.
	heads, rows, source := sh.gdn.ValueHeads, sh.gdn.ValueDim, func(n int) (splitModule, error) { return gdnSplitSource(h200Props(), sh.gdn, opt, n, tn) }
	if sh.layer == "mamba2" {
		heads, rows, source = sh.m2.Heads, sh.m2.HeadDim, func(n int) (splitModule, error) { return mamba2SplitSource(h200Props(), sh.m2, opt, n, tn) }
	}
	// The dump shows the main module unless REPLAYSSM_CUDA_HEAD_SPLIT asks
	// for the split one.
	if split, _ := planHeadSplit(opt, heads, rows, h200Props().smCount, tn); split > 1 && tn.headSplit > 1 {
		m, err := source(split)
		if err != nil {
			t.Fatal(err)
		}
		src, args, defines = m.src, m.opts, m.opts
	}
	t.Logf("%s %v+%v: defines %v", name, opt.State, opt.ReadCopy, defines)
	ptx, err := n.build(file, src, append([]string{"--gpu-architecture=compute_90"}, args...), false)
	if err != nil {
		t.Fatalf("NVRTC %d.%d: %v", n.major, n.minor, err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("module.ptx", ptx)
	// The source NVRTC compiled: ncu's source lines (gpu_check.sh profile)
	// number this text, not the embedded files.
	write("module.cu", []byte(src))
	report := assemble(t, ptxas, dir, []byte(hopperCompat(string(ptx))))
	for k, r := range ptxasResources(report) {
		t.Logf("%-28s %3d registers, %3d bytes of spill stores, %3d of spill loads", k, r.regs, r.spillStores, r.spillLoads)
	}
	if objdump := filepath.Join(filepath.Dir(ptxas), "cuobjdump"); fileExists(objdump) {
		sass, err := exec.Command(objdump, "-sass", filepath.Join(dir, "module.cubin")).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v", objdump, err)
		}
		write("module.sass", sass)
	}
}

var (
	expectTx = regexp.MustCompile(`mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[(%r\d+)\], (%r\d+);`)
	bulkCopy = regexp.MustCompile(`cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes \[(%r\d+)\], \[(%rd\d+)\], (%r\d+), \[(%r\d+)\];`)
)

// hopperCompat rewrites the PTX instructions that ptxas 11.8 rejects into
// ones it takes with the same operands live (a plain mbarrier arrive, a
// 16-byte cp.async, a CTA fence): for resource estimates only.
func hopperCompat(ptx string) string {
	ptx = strings.ReplaceAll(ptx, "fence.mbarrier_init.release.cluster;", "membar.cta;")
	ptx = strings.ReplaceAll(ptx, "fence.proxy.async.shared::cta;", "membar.cta;")
	ptx = expectTx.ReplaceAllString(ptx, "mbarrier.arrive.shared::cta.b64 _, [$1]; add.u32 $2, $2, 0;")
	return bulkCopy.ReplaceAllString(ptx, "cp.async.ca.shared.global [$1], [$2], 16; add.u32 $3, $3, $4;")
}

// TestHopperCompat checks the rewrite on the instructions the kernels emit.
func TestHopperCompat(t *testing.T) {
	in := "\tfence.mbarrier_init.release.cluster;\n" +
		"\tfence.proxy.async.shared::cta;\n" +
		"\tmbarrier.arrive.expect_tx.shared::cta.b64 _, [%r12], %r13;\n" +
		"\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2], %r3, [%r4];\n"
	want := "\tmembar.cta;\n" +
		"\tmembar.cta;\n" +
		"\tmbarrier.arrive.shared::cta.b64 _, [%r12]; add.u32 %r13, %r13, 0;\n" +
		"\tcp.async.ca.shared.global [%r1], [%rd2], 16; add.u32 %r3, %r3, %r4;\n"
	if got := hopperCompat(in); got != want {
		t.Errorf("hopperCompat:\n%s\nwant\n%s", got, want)
	}
}
