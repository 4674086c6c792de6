//go:build !linux

package main

import "syscall"

// childAttr is nil where there is no parent-death signal: there, a harness
// killed with SIGKILL leaves its idemd running (stdin EOF and SIGTERM still
// stop it).
func childAttr() *syscall.SysProcAttr { return nil }
