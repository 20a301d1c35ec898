//go:build nomodel

package models

import "embed"

// embedded reports whether the default model is compiled in: not with
// -tags nomodel.
const embedded = false

// defaultFiles is empty without the default model.
var defaultFiles embed.FS
