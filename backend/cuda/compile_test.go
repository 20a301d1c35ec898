package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// imageDevice is a Device with this machine's NVRTC and no driver, for
// compileImage (NVRTC and the disk cache; loading a module needs the
// driver): sm_90's properties, its kernel cache in a fresh directory. The
// test skips without NVRTC.
func imageDevice(t *testing.T) (*Device, string) {
	t.Helper()
	if _, err := loadNVRTC(newSearchPlan(os.Getenv, nil)); err != nil {
		t.Skipf("no NVRTC on this machine (%v): TestKernelCache checks Compile on the GPU machine", err)
	}
	cache := t.TempDir()
	return &Device{plan: newSearchPlan(os.Getenv, nil), ccMajor: 9, opts: Options{KernelCache: cache}}, cache
}

// TestCompileImageOnce checks the image builds: callers asking for one new
// image at once share one NVRTC run (one compiles, the others join it or,
// arriving after it, read the cache it wrote), a later caller reads the
// cache, a damaged entry is rebuilt and replaced, a compile error reaches
// every caller with NVRTC's log, and a caller whose context has ended gets
// its error.
func TestCompileImageOnce(t *testing.T) {
	d, cache := imageDevice(t)
	ctx := context.Background()
	src := fmt.Sprintf("extern \"C\" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }\n// nonce %d\n", time.Now().UnixNano())

	const callers = 8
	images := make([][]byte, callers)
	infos := make([]CompileInfo, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { images[i], infos[i], errs[i] = d.compileImage(ctx, "fill.cu", src, nil, false) })
	}
	wg.Wait()
	compiled := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		info := infos[i]
		if info.Compile > 0 {
			compiled++
		}
		if n := btoi(info.Compile > 0) + btoi(info.Joined) + btoi(info.CacheHit); n != 1 {
			t.Errorf("caller %d: %+v: want exactly one of compiled, joined, cache hit", i, info)
		}
		if !bytes.Equal(images[i], images[0]) || len(images[i]) == 0 {
			t.Errorf("caller %d: %d bytes, caller 0 %d: not the same image", i, len(images[i]), len(images[0]))
		}
		if !strings.HasPrefix(info.CachePath, cache) {
			t.Errorf("caller %d: cache path %q outside %q", i, info.CachePath, cache)
		}
	}
	st := d.CompileStats()
	if compiled != 1 || st.Compiled != 1 || st.Joined+st.FromCache != callers-1 {
		t.Errorf("%d callers: %d compiled, stats %v; want one NVRTC run", callers, compiled, st)
	}
	t.Logf("%d callers: %v", callers, st)

	_, again, err := d.compileImage(ctx, "fill.cu", src, nil, false)
	if err != nil || !again.CacheHit || again.Compile != 0 {
		t.Errorf("a later caller: %+v, %v; want a cache hit", again, err)
	}

	path := infos[0].CachePath
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	image, rebuilt, err := d.compileImage(ctx, "fill.cu", src, nil, true)
	if err != nil || rebuilt.CacheHit || rebuilt.Compile <= 0 {
		t.Errorf("a damaged entry: %+v, %v; want it compiled again", rebuilt, err)
	}
	if onDisk, err := os.ReadFile(path); err != nil || !bytes.Equal(onDisk, bytes.TrimRight(image, "\x00")) && !bytes.Equal(onDisk, image) {
		t.Errorf("the damaged entry was not replaced by the new image (%v)", err)
	}

	bad := "extern \"C\" __global__ void broken(float* x) { x[0] = undeclared; }\n"
	for i := range callers {
		wg.Go(func() { _, _, errs[i] = d.compileImage(ctx, "broken.cu", bad, nil, false) })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "undeclared") {
			t.Errorf("caller %d of a broken source: %v, want NVRTC's log naming the error", i, err)
		}
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := d.compileImage(done, "fill.cu", src+"// other\n", nil, false); !errors.Is(err, context.Canceled) {
		t.Errorf("an ended context: %v", err)
	}
}
