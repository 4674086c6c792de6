//go:build !linux

package main

import "time"

// selfCPU is not measured outside Linux.
func selfCPU() time.Duration { return 0 }

// procStat is read from /proc on Linux only.
type procStat struct {
	ppid          uint32
	cpu, childCPU time.Duration
}

// readProcStat reads nothing outside Linux.
func readProcStat(uint32) (procStat, bool) { return procStat{}, false }

// processCPU is not measured outside Linux.
func processCPU([]uint32) map[uint32]time.Duration { return nil }

// machineCPU is read from /proc on Linux only.
type machineCPU struct {
	busy, idle, iowait, steal time.Duration
}

// readMachineCPU reads nothing outside Linux.
func readMachineCPU() (machineCPU, bool) { return machineCPU{}, false }
