package main

import "syscall"

// childAttr makes the kernel kill idemd when the harness dies, even by
// SIGKILL, so that a harness killed by its test runner leaves no idemd.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
