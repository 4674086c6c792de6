//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDatabase keeps a second idemd off one SQLite file: it takes an
// exclusive flock on <file>.lock, next to the database file, without
// waiting, and holds it until unlock or the process's end (kill -9
// included: the kernel drops the lock). SQLite would let two processes share
// the file, but each idemd's store keeps its writes in one queue, and two
// queues on one file wait on each other through SQLite's busy timeout.
//
// <file> is the database's path with its symbolic links resolved (the file
// itself, or the directories on the way, or a link to a file yet to be
// created), as SQLite resolves them to name its journal: every path that
// leads to one file leads to one lock.
func lockDatabase(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of the SQLite database %s: %v", path, err)
	}
	file, err := resolveLinks(path)
	if err != nil {
		return nil, fmt.Errorf("resolve the path of the SQLite database %s: %v", path, err)
	}
	name := file + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the lock file %s: %v", name, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		holder := ""
		if b, rerr := os.ReadFile(name); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("the SQLite database %s is in use by another idemd%s: one SQLite file serves one process; stop the other one, or run several replicas on PostgreSQL (--database-url postgres://…)", path, holder)
		}
		return nil, fmt.Errorf("lock %s: %v", name, err)
	}
	// The pid is only for the message above; the lock is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// maxLinks bounds the symbolic links resolveLinks follows, as the kernel
// bounds them (ELOOP).
const maxLinks = 40

// resolveLinks returns the absolute path of the file that path names, with
// every symbolic link on the way resolved, also when the file does not
// exist yet: its directory's path resolved, and a link that points at it
// followed.
func resolveLinks(path string) (string, error) {
	for range maxLinks {
		resolved, err := filepath.EvalSymlinks(path)
		if err == nil {
			return filepath.Abs(resolved)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(path))
		if err != nil {
			return "", err
		}
		target, err := os.Readlink(path)
		if err != nil {
			// No file there yet, and no link: SQLite creates the file.
			return filepath.Abs(filepath.Join(dir, filepath.Base(path)))
		}
		// A link to a file yet to be created: the kernel follows it from
		// the link's own directory.
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		path = target
	}
	return "", fmt.Errorf("more than %d symbolic links", maxLinks)
}
