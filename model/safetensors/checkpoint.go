package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// IndexFile is the name of the shard index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// SingleFile is the name of an unsharded checkpoint's only weight file.
const SingleFile = "model.safetensors"

// Checkpoint is a model's weights spread over one or more .safetensors files
// in a directory, looked up by tensor name. Like File, its methods may be used
// concurrently, except Close.
type Checkpoint struct {
	dir   string
	files []*File          // each shard once, in the order opened
	where map[string]*File // tensor name -> shard holding it
	names []string         // sorted
}

// OpenDir opens the checkpoint in dir. With a model.safetensors.index.json
// there, its weight_map decides which shard holds each tensor (tensors a shard
// holds but the index does not list are ignored, as transformers ignores
// them); otherwise model.safetensors is the checkpoint; otherwise every
// *.safetensors file in dir is opened and a tensor name found in two of them
// is an error.
func OpenDir(dir string) (*Checkpoint, error) {
	index := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(index); err == nil {
		return openIndexed(dir, index)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var paths []string
	if _, err := os.Stat(filepath.Join(dir, SingleFile)); err == nil {
		paths = []string{filepath.Join(dir, SingleFile)}
	} else {
		var err error
		paths, err = filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if err != nil {
			return nil, err
		}
		slices.Sort(paths)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no %s, %s or *.safetensors files", dir, IndexFile, SingleFile)
	}
	c := &Checkpoint{dir: dir, where: make(map[string]*File)}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
		for _, name := range f.names {
			if other, dup := c.where[name]; dup {
				c.Close()
				return nil, newError(p, name, ErrFormat, "also present in %s", other.path)
			}
			c.where[name] = f
		}
	}
	c.index()
	return c, nil
}

func openIndexed(dir, index string) (*Checkpoint, error) {
	raw, err := os.ReadFile(index)
	if err != nil {
		return nil, err
	}
	bad := func(tensor, format string, args ...any) error {
		return newError(index, tensor, ErrFormat, format, args...)
	}
	top, err := objectFields(raw)
	if err != nil {
		return nil, bad("", "%v", err)
	}
	var weightMap json.RawMessage
	for _, fl := range top {
		if fl.key == "weight_map" {
			weightMap = fl.value
		}
	}
	if weightMap == nil {
		return nil, bad("", "no weight_map")
	}
	entries, err := objectFields(weightMap)
	if err != nil {
		return nil, bad("", "weight_map: %v", err)
	}
	if len(entries) == 0 {
		return nil, bad("", "weight_map is empty")
	}

	c := &Checkpoint{dir: dir, where: make(map[string]*File, len(entries))}
	shards := make(map[string]*File)
	for _, e := range entries {
		var shard string
		if err := json.Unmarshal(e.value, &shard); err != nil {
			c.Close()
			return nil, bad(e.key, "weight_map value %s is not a file name", e.value)
		}
		// Shards live in the checkpoint directory: refuse paths that leave it.
		if !filepath.IsLocal(shard) {
			c.Close()
			return nil, bad(e.key, "shard %q is not a file inside %s", shard, dir)
		}
		if _, dup := c.where[e.key]; dup {
			c.Close()
			return nil, bad(e.key, "listed twice in weight_map")
		}
		f, ok := shards[shard]
		if !ok {
			f, err = Open(filepath.Join(dir, shard))
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: shard of tensor %q: %w", index, e.key, err)
			}
			shards[shard] = f
			c.files = append(c.files, f)
		}
		if !f.Has(e.key) {
			c.Close()
			return nil, newError(f.path, e.key, ErrFormat, "listed in %s but not in this shard", IndexFile)
		}
		c.where[e.key] = f
	}
	c.index()
	return c, nil
}

func (c *Checkpoint) index() {
	c.names = make([]string, 0, len(c.where))
	for name := range c.where {
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
}

// Close closes every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Dir returns the directory the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// Files returns the open shards, each once.
func (c *Checkpoint) Files() []*File { return slices.Clone(c.files) }

// Names returns every tensor name in sorted order.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Has reports whether the checkpoint holds a tensor called name.
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.where[name]
	return ok
}

// Info describes the tensor called name; its File says which shard holds it.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	f, ok := c.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Bytes returns the raw bytes of the tensor called name; see File.Bytes.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f, err := c.shard(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// Float32 returns the tensor called name as float32, checking its shape; see
// File.Float32.
func (c *Checkpoint) Float32(name string, shape ...int) ([]float32, error) {
	f, err := c.shard(name)
	if err != nil {
		return nil, err
	}
	return f.Float32(name, shape...)
}

func (c *Checkpoint) shard(name string) (*File, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, newError(c.dir, name, ErrNotFound, "not found in any shard")
	}
	return f, nil
}
