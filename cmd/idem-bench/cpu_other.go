//go:build !linux

package main

import "time"

// selfCPU is not measured outside Linux.
func selfCPU() time.Duration { return 0 }

// processCPU is not measured outside Linux.
func processCPU([]uint32) map[uint32]time.Duration { return nil }
