//go:build !nomodel

package models

import "embed"

// embedded reports whether the default model is compiled in.
const embedded = true

// defaultFiles are the files of the default model that loading and
// generation read.
//
//go:embed qwen35-kjv/config.json qwen35-kjv/generation_config.json qwen35-kjv/model.safetensors qwen35-kjv/mtp.safetensors
//go:embed qwen35-kjv/tokenizer.json qwen35-kjv/tokenizer_config.json
var defaultFiles embed.FS
