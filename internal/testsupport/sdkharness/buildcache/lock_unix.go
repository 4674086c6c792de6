//go:build unix

package buildcache

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive flock on path, waiting for it.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the build lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("the build lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the file drops the lock
}
