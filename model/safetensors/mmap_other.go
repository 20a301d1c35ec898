//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package safetensors

import "os"

// mapFile reads the whole file: this platform has no syscall.Mmap.
func mapFile(f *os.File, size int) (data []byte, mapped bool, err error) {
	data, err = readAll(f, size)
	return data, false, err
}

func unmapFile([]byte) error { return nil }
