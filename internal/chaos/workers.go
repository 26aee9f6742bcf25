package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Workers runs N processes of one binary (cmd/worker, or cmd/api for the
// api replicas), kills them with SIGKILL on demand and restarts them; a
// process that exits by itself is restarted too, and counted.
type Workers struct {
	Bin string
	// Name prefixes the processes' names and logs (NAME-N.log); default
	// "worker".
	Name string
	Env  []string // appended to the driver's environment
	// SlotEnv, when set, adds slot i's own variables (an api replica's
	// fixed address) after Env.
	SlotEnv func(i int) []string
	LogDir  string
	// PidFile, when set, always holds the pids of the running workers, one
	// a line, so that the script's cleanup can stop them if the driver dies.
	PidFile string
	Logf    func(format string, args ...any)

	mu       sync.Mutex
	slots    []*slot
	stopping bool
	kills    int
	starts   int
	exits    []string // unexpected exits: "worker-1: exit status 1"
}

type slot struct {
	i       int
	cmd     *exec.Cmd
	done    chan struct{}
	killing bool
	exitErr error
	// log and logOffset locate this process's part of the slot's log, where
	// River logs its client id (the id in river_job.attempted_by).
	log       string
	logOffset int64
	clientID  string
}

// Start starts n workers.
func (w *Workers) Start(n int) error {
	for i := range n {
		w.mu.Lock()
		w.slots = append(w.slots, &slot{i: i})
		err := w.startLocked(w.slots[i])
		w.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *Workers) name() string {
	if w.Name == "" {
		return "worker"
	}
	return w.Name
}

func (w *Workers) startLocked(s *slot) error {
	path := filepath.Join(w.LogDir, fmt.Sprintf("%s-%d.log", w.name(), s.i))
	logf, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.log, s.clientID = path, ""
	if fi, err := logf.Stat(); err == nil {
		s.logOffset = fi.Size()
	}
	fmt.Fprintf(logf, "=== chaosdriver: starting %s-%d at %s\n", w.name(), s.i, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(w.Bin)
	cmd.Env = append(os.Environ(), w.Env...)
	if w.SlotEnv != nil {
		cmd.Env = append(cmd.Env, w.SlotEnv(s.i)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s-%d: %w", w.name(), s.i, err)
	}
	s.cmd, s.done, s.killing, s.exitErr = cmd, make(chan struct{}), false, nil
	w.starts++
	w.writePidsLocked()
	go w.watch(s, cmd, s.done, logf)
	return nil
}

// watch reaps a worker and restarts it when it exited by itself.
func (w *Workers) watch(s *slot, cmd *exec.Cmd, done chan struct{}, logf *os.File) {
	err := cmd.Wait()
	fmt.Fprintf(logf, "=== chaosdriver: %s-%d (pid %d) ended: %v\n", w.name(), s.i, cmd.Process.Pid, err)
	logf.Close()
	w.mu.Lock()
	s.exitErr = err
	unexpected := !s.killing && !w.stopping
	close(done)
	if unexpected {
		msg := fmt.Sprintf("%s-%d (pid %d) exited by itself: %v", w.name(), s.i, cmd.Process.Pid, err)
		w.exits = append(w.exits, msg)
		w.Logf("%s; restarting it in 1s", msg)
	}
	w.mu.Unlock()
	if unexpected {
		time.Sleep(time.Second)
		w.mu.Lock()
		if !w.stopping && s.cmd == cmd {
			if err := w.startLocked(s); err != nil {
				w.Logf("%v", err)
			}
		}
		w.mu.Unlock()
	}
}

// KillRandom kills one running worker with SIGKILL, waits for it to die,
// and starts a new one in its slot after restartDelay. It returns the
// worker's name and pid.
func (w *Workers) KillRandom(rng *rand.Rand, restartDelay time.Duration) (string, error) {
	return w.kill(func(alive []*slot) *slot { return alive[rng.IntN(len(alive))] }, restartDelay, nil)
}

// KillSlot kills the process of slot i like KillRandom, and calls
// afterDeath (when not nil) once it is dead and before its replacement
// starts.
func (w *Workers) KillSlot(i int, restartDelay time.Duration, afterDeath func()) (string, error) {
	return w.kill(func(alive []*slot) *slot {
		for _, s := range alive {
			if s.i == i {
				return s
			}
		}
		return nil
	}, restartDelay, afterDeath)
}

// KillClient kills the running worker whose River client id is clientID,
// like KillRandom; found is false (and nothing is killed) when no running
// worker has that id.
func (w *Workers) KillClient(clientID string, restartDelay time.Duration) (who string, found bool, err error) {
	who, err = w.kill(func(alive []*slot) *slot {
		for _, s := range alive {
			if s.riverClientID() == clientID {
				return s
			}
		}
		return nil
	}, restartDelay, nil)
	if errors.Is(err, errNoWorker) {
		return "", false, nil
	}
	return who, err == nil, err
}

var errNoWorker = errors.New("no running worker to kill")

func (w *Workers) kill(pick func(alive []*slot) *slot, restartDelay time.Duration, afterDeath func()) (string, error) {
	w.mu.Lock()
	var alive []*slot
	for _, s := range w.slots {
		select {
		case <-s.done:
		default:
			if !s.killing {
				alive = append(alive, s)
			}
		}
	}
	if len(alive) == 0 || w.stopping {
		w.mu.Unlock()
		return "", errNoWorker
	}
	s := pick(alive)
	if s == nil {
		w.mu.Unlock()
		return "", errNoWorker
	}
	s.killing = true
	cmd, done := s.cmd, s.done
	w.mu.Unlock()

	pid := cmd.Process.Pid
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return "", err
	}
	<-done
	if afterDeath != nil {
		afterDeath()
	}
	w.mu.Lock()
	w.kills++
	w.mu.Unlock()
	time.Sleep(restartDelay)
	w.mu.Lock()
	defer w.mu.Unlock()
	who := fmt.Sprintf("%s-%d (pid %d)", w.name(), s.i, pid)
	if w.stopping {
		return who, nil
	}
	return who, w.startLocked(s)
}

// Stop sends SIGTERM to every worker and SIGKILL to those still running
// after timeout.
func (w *Workers) Stop(timeout time.Duration) {
	w.mu.Lock()
	w.stopping = true
	slots := append([]*slot(nil), w.slots...)
	w.mu.Unlock()
	for _, s := range slots {
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(timeout)
	for _, s := range slots {
		if s.done == nil {
			continue
		}
		select {
		case <-s.done:
		case <-deadline:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	w.mu.Lock()
	w.slots = nil
	w.writePidsLocked()
	w.mu.Unlock()
}

// Stats reports kills, starts and unexpected exits so far.
func (w *Workers) Stats() (kills, starts int, exits []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kills, w.starts, append([]string(nil), w.exits...)
}

// WaitAllRunning waits until every slot has a live process.
func (w *Workers) WaitAllRunning(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.Lock()
		ok := true
		for _, s := range w.slots {
			select {
			case <-s.done:
				ok = false
			default:
			}
		}
		w.mu.Unlock()
		if ok {
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// riverClientID returns the River client id the slot's current process
// logged at start ("" until it has). Called with w.mu held.
func (s *slot) riverClientID() string {
	if s.clientID != "" {
		return s.clientID
	}
	f, err := os.Open(s.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(s.logOffset, io.SeekStart); err != nil {
		return ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"River client started"`)) {
			continue
		}
		var rec struct {
			ClientID string `json:"client_id"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.ClientID != "" {
			s.clientID = rec.ClientID
			return s.clientID
		}
	}
	return ""
}

func (w *Workers) writePidsLocked() {
	if w.PidFile == "" {
		return
	}
	var b strings.Builder
	for _, s := range w.slots {
		if s.cmd != nil && s.cmd.Process != nil {
			select {
			case <-s.done:
				continue
			default:
			}
			b.WriteString(strconv.Itoa(s.cmd.Process.Pid) + "\n")
		}
	}
	_ = os.WriteFile(w.PidFile, []byte(b.String()), 0o644)
}

// Pids returns the pids of the running processes.
func (w *Workers) Pids() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var pids []int
	for _, s := range w.slots {
		if s.cmd == nil || s.cmd.Process == nil {
			continue
		}
		select {
		case <-s.done:
		default:
			pids = append(pids, s.cmd.Process.Pid)
		}
	}
	return pids
}
