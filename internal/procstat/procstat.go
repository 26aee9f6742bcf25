// Package procstat reads process and machine CPU counters from Linux's
// /proc, for the benchmark and scaling harnesses.
package procstat

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Fields returns the fields of /proc/PID/stat after the command name
// (which may hold spaces): Fields(pid)[0] is field 3, the state.
func Fields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("procstat: unexpected /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, errors.New("procstat: short /proc stat")
	}
	return f, nil
}

// CPUTicks returns a process's user plus system time in clock ticks
// (USER_HZ, 100 a second on Linux), or false when it cannot be read.
func CPUTicks(pid int) (uint64, bool) {
	f, err := Fields(pid)
	if err != nil {
		return 0, false
	}
	// utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return ut + st, true
}

// MachineTicks returns the first eight counters of /proc/stat's cpu line
// (user, nice, system, idle, iowait, irq, softirq, steal), or nil.
func MachineTicks() []uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return nil
	}
	out := make([]uint64, 8)
	for i := range 8 {
		out[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	return out
}

// MachineBusy is the share of all cores busy between two MachineTicks
// readings a and b (iowait counts as idle), 0 when either is missing.
func MachineBusy(a, b []uint64) float64 {
	if len(a) < 8 || len(b) < 8 {
		return 0
	}
	var total uint64
	for i := range 8 {
		total += b[i] - a[i]
	}
	idle := (b[3] - a[3]) + (b[4] - a[4])
	if total == 0 {
		return 0
	}
	return float64(total-idle) / float64(total)
}

// LoadAvg returns /proc/loadavg's first three fields, or "?".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
