//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safetensors

import (
	"errors"
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only. mapped is false when the file system
// cannot map files (ENODEV) and the content was read into memory instead.
func mapFile(f *os.File, size int) (data []byte, mapped bool, err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if errors.Is(err, syscall.ENODEV) {
		data, err = readAll(f, size)
		return data, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

func unmapFile(data []byte) error { return syscall.Munmap(data) }
