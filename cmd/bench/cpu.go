package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/procstat"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// auxBackends are the Postgres processes that work for every database:
// counted with the benchmark database's backends.
var auxBackends = []string{"walwriter", "checkpointer", "background writer", "autovacuum launcher", "walsender"}

// sampler snapshots CPU use: the harness process (getrusage), the Postgres
// backends of one database plus the server's WAL writer, checkpointer and
// background writer (/proc/PID/stat), and the whole machine (/proc/stat).
// The harness runs the clients, the api and the workers in one process, so
// its CPU is theirs together.
type sampler struct {
	admin *pgx.Conn
	db    string
}

type cpuSnap struct {
	at      time.Time
	self    time.Duration
	pg      map[int]uint64 // ticks by pid
	machine []uint64       // /proc/stat cpu line: user nice system idle iowait irq softirq steal
	walLSN  uint64
}

// cpuUsage is CPU over a window, in cores (1.0 = one core busy all the
// window), and the machine's busy, system and iowait shares of all cores.
type cpuUsage struct {
	Seconds      float64
	HarnessCores float64
	PGCores      float64
	MachineBusy  float64 // fraction of all cores, 0..1
	MachineSys   float64
	MachineIO    float64
	WALBytes     uint64 // cluster-wide: other databases' writes are included
}

func newSampler(ctx context.Context, adminURL, db string) (*sampler, error) {
	conn, err := connectAdmin(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	return &sampler{admin: conn, db: db}, nil
}

func (s *sampler) close() { _ = s.admin.Close(context.Background()) }

func (s *sampler) snap(ctx context.Context) cpuSnap {
	snap := cpuSnap{at: time.Now(), pg: map[int]uint64{}}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		snap.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	rows, err := s.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 OR backend_type = ANY($2)`, s.db, auxBackends)
	if err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				if t, ok := procstat.CPUTicks(pid); ok {
					snap.pg[pid] = t
				}
			}
		}
		rows.Close()
	}
	var lsn string
	if s.admin.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn) == nil {
		snap.walLSN = parseLSN(lsn)
	}
	snap.machine = procstat.MachineTicks()
	return snap
}

// usage is the CPU between a and b. A backend that started after a counts
// with all its CPU; one that ended before b is lost (pools keep theirs).
func usage(a, b cpuSnap) cpuUsage {
	secs := b.at.Sub(a.at).Seconds()
	u := cpuUsage{Seconds: secs}
	if secs <= 0 {
		return u
	}
	u.HarnessCores = (b.self - a.self).Seconds() / secs
	var pgTicks uint64
	for pid, t := range b.pg {
		if t0, ok := a.pg[pid]; ok && t >= t0 {
			pgTicks += t - t0
		} else if !ok {
			pgTicks += t
		}
	}
	u.PGCores = float64(pgTicks) / clockTicks / secs
	if len(a.machine) >= 8 && len(b.machine) >= 8 {
		var total, idle, sys, io uint64
		for i := range 8 {
			total += b.machine[i] - a.machine[i]
		}
		idle = b.machine[3] - a.machine[3]
		io = b.machine[4] - a.machine[4]
		sys = (b.machine[2] - a.machine[2]) + (b.machine[5] - a.machine[5]) + (b.machine[6] - a.machine[6])
		if total > 0 {
			u.MachineBusy = float64(total-idle-io) / float64(total)
			u.MachineSys = float64(sys) / float64(total)
			u.MachineIO = float64(io) / float64(total)
		}
	}
	if b.walLSN >= a.walLSN {
		u.WALBytes = b.walLSN - a.walLSN
	}
	return u
}

// String is the CPU column: harness and Postgres in cores, the machine's
// busy share of all its cores with system time and iowait.
func (u cpuUsage) String() string {
	if u.Seconds == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f + %.2f · %.0f%% (sys %.0f%%, io %.0f%%)",
		u.HarnessCores, u.PGCores, 100*u.MachineBusy, 100*u.MachineSys, 100*u.MachineIO)
}

func parseLSN(s string) uint64 {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0
	}
	h, err1 := strconv.ParseUint(hi, 16, 64)
	l, err2 := strconv.ParseUint(lo, 16, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return h<<32 | l
}

func numCPU() int { return runtime.NumCPU() }
