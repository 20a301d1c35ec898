// Package models holds the small language models that ship with replayssm
// and opens the default one, so that `replayssm generate "prompt"` writes
// text on a fresh machine with no download.
//
// Each model is a Hugging Face folder next to this file (config.json,
// bf16 model.safetensors, tokenizer.json, tokenizer_config.json,
// generation_config.json, eval.json) with its model card in README.md;
// qwen35-kjv also has its MTP head in mtp.safetensors:
//
//	qwen35-kjv     Qwen3.5-style (Gated DeltaNet + gated attention, 3:1), 7.0M parameters: the default
//	nemotronh-kjv  NemotronH-style (Mamba-2 + attention + relu² MLP), 7.0M parameters
//
// Both were trained by tools/train_small.py on the King James Bible
// (tools/prepare_corpus.py); kjv-test.txt is the held-out test split.
//
// The default model's files are compiled into the program (go:embed), so
// it runs from any directory: DefaultDir writes them once to the user's
// cache directory and returns that folder. Building with -tags nomodel
// leaves them out (a binary 16 MB smaller that needs --model).
package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// Default names the model that replayssm uses when no --model is given.
const Default = "qwen35-kjv"

// DefaultDir returns a directory holding the default model, ready for
// model.Load, tokenizer.Load and chat.Load. The first call writes the
// compiled-in files to <user cache dir>/replayssm/models/<Default>-<hash>
// (os.UserCacheDir; the system temporary directory if there is none), where
// hash is a digest of the files, so a program with other weights never
// reads a stale copy. Later calls and later runs reuse the folder.
func DefaultDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return extract(filepath.Join(base, "replayssm", "models"))
}

// extract writes the default model under parent unless a complete copy is
// there already, and returns its folder.
func extract(parent string) (string, error) {
	if !embedded {
		return "", fmt.Errorf("this replayssm was built with -tags nomodel and has no built-in model: pass --model <folder>")
	}
	entries, err := fs.ReadDir(defaultFiles, Default)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries {
		data, err := defaultFiles.ReadFile(path.Join(Default, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(data))
		h.Write(data)
	}
	dir := filepath.Join(parent, Default+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if complete(dir, entries) {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	// Write into a fresh folder and rename it into place, so that a reader
	// (another replayssm starting at the same time) never sees half a model.
	tmp, err := os.MkdirTemp(parent, Default+".tmp-")
	if err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, e := range entries {
		data, _ := defaultFiles.ReadFile(path.Join(Default, e.Name()))
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), data, 0o644); err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if complete(dir, entries) { // another process got there first
			return dir, nil
		}
		if err := os.RemoveAll(dir); err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			return "", fmt.Errorf("default model: %w", err)
		}
	}
	return dir, nil
}

// complete reports whether dir holds every file of entries with its size.
func complete(dir string, entries []fs.DirEntry) bool {
	for _, e := range entries {
		want, err := e.Info()
		if err != nil {
			return false
		}
		got, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || !got.Mode().IsRegular() || got.Size() != want.Size() {
			return false
		}
	}
	return true
}
