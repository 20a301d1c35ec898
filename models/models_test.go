package models_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tokenizer"
)

// shipped are the model folders next to this file.
var shipped = []string{"qwen35-kjv", "nemotronh-kjv"}

// evalFile is the part of a model's eval.json (written by
// tools/train_small.py from transformers' measurements) that the tests use.
type evalFile struct {
	Window       int `json:"window"`
	Transformers map[string]struct {
		Predictions int     `json:"predictions"`
		NLL         float64 `json:"nll"`
		Perplexity  float64 `json:"perplexity"`
		Windows     int     `json:"windows"`
	} `json:"transformers"`
	Splits map[string]struct {
		Tokens     int    `json:"tokens"`
		SHA256IDs  string `json:"sha256_ids"`
		SHA256Text string `json:"sha256_text"`
	} `json:"splits"`
	Greedy []struct {
		Prompt    string `json:"prompt"`
		PromptIDs []int  `json:"prompt_ids"`
		IDs       []int  `json:"ids"`
	} `json:"greedy_samples"`
}

func readEval(t *testing.T, dir string) *evalFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "eval.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev evalFile
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("%s/eval.json: %v", dir, err)
	}
	return &ev
}

func idsDigest(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	h := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(h[:])
}

// TestShippedModels checks each shipped model against its card: the Go
// tokenizer reproduces HF's ids of the held-out test split, the perplexity
// of the CI slice (the first windows of that split) is within 2% of what
// transformers measured, in baseline and replay modes, the one-token decode
// path (replay ring and flushes) scores like the prefill path, and greedy
// generation repeats transformers' tokens.
func TestShippedModels(t *testing.T) {
	text, err := os.ReadFile("kjv-test.txt")
	if err != nil {
		t.Fatal(err)
	}
	textSum := sha256.Sum256(text)
	for _, name := range shipped {
		t.Run(name, func(t *testing.T) {
			ev := readEval(t, name)
			split := ev.Splits["test"]
			if got := hex.EncodeToString(textSum[:]); got != split.SHA256Text {
				t.Fatalf("kjv-test.txt sha256 %s, the model was scored on %s", got, split.SHA256Text)
			}
			tok, err := tokenizer.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			ids := tok.Encode(string(text))
			if len(ids) != split.Tokens || idsDigest(ids) != split.SHA256IDs {
				t.Fatalf("Go tokenizer: %d ids (sha256 %s); HF tokenizers: %d (%s)", len(ids), idsDigest(ids), split.Tokens, split.SHA256IDs)
			}
			d, err := model.Load(name, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ref := ev.Transformers["test_slice"]
			W := ev.Window
			for _, mode := range []replay.Mode{replay.Baseline, replay.Replay} {
				eng, err := engine.New(d, 1, replay.Options{Mode: mode, Window: replay.DefaultWindow})
				if err != nil {
					t.Fatal(err)
				}
				var sum float64
				var n int
				for w := 0; w < ref.Windows && w*W < len(ids); w++ {
					s, c, err := eng.NLL(ctx, ids[w*W:min((w+1)*W, len(ids))], W)
					if err != nil {
						t.Fatal(err)
					}
					sum, n = sum+s, n+c
				}
				eng.Close()
				ppl := math.Exp(sum / float64(n))
				rel := math.Abs(ppl-ref.Perplexity) / ref.Perplexity
				t.Logf("%v: perplexity %.4f over %d predictions; transformers %.4f (rel. diff %.1e)", mode, ppl, n, ref.Perplexity, rel)
				if n != ref.Predictions || rel > 0.02 {
					t.Errorf("%v: perplexity %.4f over %d predictions, card says %.4f over %d (more than 2%% apart)", mode, ppl, n, ref.Perplexity, ref.Predictions)
				}
			}
			checkDecodePath(t, d, ids[:128])
			checkGreedy(t, d, ev)
			card, err := os.ReadFile(filepath.Join(name, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"test", "test_slice"} {
				if s := fmt.Sprintf("%.2f", ev.Transformers[k].Perplexity); !bytes.Contains(card, []byte(s)) {
					t.Errorf("%s/README.md does not state the %s perplexity %s of eval.json", name, k, s)
				}
			}
		})
	}
}

// checkDecodePath scores ids one token per forward (decode steps through the
// replay ring, flushing every 16 steps) and compares with one prefill.
func checkDecodePath(t *testing.T, d *nn.Decoder, ids []int) {
	t.Helper()
	nll := func(chunk int) float64 {
		eng, err := engine.New(d, 1, replay.Options{Mode: replay.Replay, Window: replay.DefaultWindow})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		s, c, err := eng.NLL(context.Background(), ids, chunk)
		if err != nil {
			t.Fatal(err)
		}
		return s / float64(c)
	}
	prefill, decode := nll(len(ids)), nll(1)
	if math.Abs(prefill-decode) > 1e-4*prefill {
		t.Errorf("mean NLL over %d tokens: prefill %.6f, one-token decode steps %.6f", len(ids), prefill, decode)
	}
}

// checkGreedy generates from transformers' greedy prompts and expects the
// same tokens.
func checkGreedy(t *testing.T, d *nn.Decoder, ev *evalFile) {
	t.Helper()
	if len(ev.Greedy) == 0 {
		t.Fatal("eval.json has no greedy samples")
	}
	eng, err := engine.New(d, 1, replay.Options{Mode: replay.Replay, Window: replay.DefaultWindow})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, g := range ev.Greedy {
		res, _, err := eng.Generate(context.Background(), []engine.Request{{Prompt: g.PromptIDs, MaxTokens: len(g.IDs)}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res[0].Tokens, g.IDs) {
			t.Errorf("greedy after %q:\n got %v\nwant %v (transformers)", g.Prompt, res[0].Tokens, g.IDs)
		}
	}
}

// TestDefaultDir extracts the compiled-in default model to a fresh cache
// directory, checks the copy against the folder it was compiled from, and
// reuses it on the next call.
func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir()) // os.UserCacheDir on macOS
	dir, err := models.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 6 {
		t.Errorf("%s holds %d files, want 6", dir, len(entries))
	}
	for _, e := range entries {
		got, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(models.Default, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s/%s", e.Name(), models.Default, e.Name())
		}
	}
	again, err := models.DefaultDir()
	if err != nil || again != dir {
		t.Errorf("second call: %q, %v; want %q", again, err, dir)
	}
	// A truncated copy (a crash while copying by hand, say) is replaced.
	if err := os.Truncate(filepath.Join(dir, "model.safetensors"), 10); err != nil {
		t.Fatal(err)
	}
	if again, err = models.DefaultDir(); err != nil || again != dir {
		t.Fatalf("after truncation: %q, %v", again, err)
	}
	if _, err := model.Load(dir, model.Options{}); err != nil {
		t.Errorf("load the repaired copy: %v", err)
	}
}
