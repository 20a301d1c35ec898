package models

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// configFiles are the published config.json files of the target models
// (configs/<name>.json), which `--model <name> --random-weights` runs at
// their true shapes with seeded random weights, no checkpoint needed.
//
//go:embed configs/*.json
var configFiles embed.FS

// Configs lists the shipped configs' names.
func Configs() []string {
	entries, _ := fs.ReadDir(configFiles, "configs")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// Config returns the bytes of the shipped config called name.
func Config(name string) ([]byte, error) {
	b, err := configFiles.ReadFile("configs/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("no shipped config %q (have %s)", name, strings.Join(Configs(), ", "))
	}
	return b, nil
}
