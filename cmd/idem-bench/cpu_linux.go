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

// procStat is what idem-bench reads of a process's /proc/<pid>/stat.
type procStat struct {
	ppid uint32
	// cpu is the process's own user and system time, all its threads.
	cpu time.Duration
	// childCPU is the user and system time of its children that exited
	// and were reaped (cutime + cstime): for the postmaster, the backends
	// that have gone.
	childCPU time.Duration
}

// readProcStat reads /proc/<pid>/stat; false when the process is gone or
// cannot be read (on another machine, or another pid namespace).
func readProcStat(pid uint32) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid … utime stime cutime cstime: fields 4 and 14 to
	// 17, counted after the command name, which may hold spaces.
	rp := bytes.LastIndexByte(b, ')')
	if rp < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[rp+1:])
	if len(f) < 15 {
		return procStat{}, false
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(string(f[i]), 10, 64); return v }
	return procStat{
		ppid:     uint32(n(1)),
		cpu:      time.Duration(n(11)+n(12)) * clockTick,
		childCPU: time.Duration(n(13)+n(14)) * clockTick,
	}, true
}

// processCPU is the CPU time each of pids has used so far; a process that
// cannot be read (gone, or on another machine) is left out.
func processCPU(pids []uint32) map[uint32]time.Duration {
	out := make(map[uint32]time.Duration, len(pids))
	for _, pid := range pids {
		if st, ok := readProcStat(pid); ok {
			out[pid] = st.cpu
		}
	}
	return out
}

// machineCPU is the whole machine's CPU time by what the cores did, from the
// first line of /proc/stat: running anything (user, nice, system, irq,
// softirq; guest time is inside user), idle, idle while a task waited for
// I/O, and stolen by the hypervisor for other guests.
type machineCPU struct {
	busy, idle, iowait, steal time.Duration
}

// readMachineCPU reads the machine's CPU time so far; false when /proc/stat
// cannot be read.
func readMachineCPU() (machineCPU, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, false
	}
	return parseMachineCPU(b)
}

// parseMachineCPU reads the machine's CPU time from /proc/stat's text.
func parseMachineCPU(b []byte) (machineCPU, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	// cpu user nice system idle iowait irq softirq steal …
	if len(f) < 9 || string(f[0]) != "cpu" {
		return machineCPU{}, false
	}
	n := func(i int) time.Duration {
		v, _ := strconv.ParseInt(string(f[i]), 10, 64)
		return time.Duration(v) * clockTick
	}
	return machineCPU{
		busy:   n(1) + n(2) + n(3) + n(6) + n(7),
		idle:   n(4),
		iowait: n(5),
		steal:  n(8),
	}, true
}
