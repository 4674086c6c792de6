//go:build !unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDatabase only creates the database's directory here: without flock,
// nothing keeps a second idemd off one SQLite file on this system.
func lockDatabase(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of the SQLite database %s: %v", path, err)
	}
	return func() {}, nil
}
