package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/*/stat's times: USER_HZ, 100 on Linux.
const clockTick = 10 * time.Millisecond

// processCPU is the CPU time each of pids has used so far; a process that
// cannot be read (gone, or on another machine) is left out.
func processCPU(pids []uint32) map[uint32]time.Duration {
	out := make(map[uint32]time.Duration, len(pids))
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime stime: fields 14 and 15, counted
		// after the command name, which may hold spaces.
		rp := bytes.LastIndexByte(b, ')')
		if rp < 0 {
			continue
		}
		f := bytes.Fields(b[rp+1:])
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(string(f[11]), 10, 64)
		stime, _ := strconv.ParseInt(string(f[12]), 10, 64)
		out[pid] = time.Duration(utime+stime) * clockTick
	}
	return out
}
