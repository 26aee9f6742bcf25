package mailpit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// EnvSMTPAddr names the environment variable holding the host:port of
	// a running Mailpit's SMTP server (scripts/services.sh exports it).
	EnvSMTPAddr = "MAILPIT_SMTP_ADDR"
	// EnvAPIURL names the environment variable holding the base URL of the
	// same Mailpit's HTTP API.
	EnvAPIURL = "MAILPIT_API_URL"

	// BinaryPath is where scripts/services.sh installs the pinned Mailpit,
	// relative to the repository root.
	BinaryPath = ".tmp/bin/mailpit"

	// startTimeout bounds how long a private Mailpit may take to listen.
	startTimeout = 30 * time.Second
	// startAttempts bounds the retries when a private Mailpit loses the
	// race for the ports picked for it.
	startAttempts = 3
)

// Start gives a test a Mailpit: the one named by MAILPIT_SMTP_ADDR and
// MAILPIT_API_URL when both are set (scripts/test.sh sets them), otherwise a
// private one started with StartPrivate for this test and stopped when it
// ends. It never skips: without the variables and without the binary at
// <repo>/.tmp/bin/mailpit it fails the test, saying how to get one.
//
// The returned Mailpit may be shared with other tests and test processes:
// find messages by something unique to the test.
func Start(t testing.TB) (smtpAddr, apiURL string) {
	t.Helper()
	smtpAddr, apiURL = os.Getenv(EnvSMTPAddr), os.Getenv(EnvAPIURL)
	switch {
	case smtpAddr != "" && apiURL != "":
		return smtpAddr, apiURL
	case smtpAddr != "" || apiURL != "":
		t.Fatalf("mailpit: set both %s and %s, or neither (got %s=%q, %s=%q)",
			EnvSMTPAddr, EnvAPIURL, EnvSMTPAddr, smtpAddr, EnvAPIURL, apiURL)
	}
	return StartPrivate(t)
}

// StartPrivate starts a Mailpit of the test's own from <repo>/.tmp/bin/mailpit
// on free loopback ports, with any or no SMTP authentication, no TLS and its
// database in a temporary directory, plus extraArgs (for example
// "--chaos-triggers", "Recipient:550:100"). It is stopped when the test ends.
// It fails the test when the binary is missing, naming scripts/services.sh.
func StartPrivate(t testing.TB, extraArgs ...string) (smtpAddr, apiURL string) {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("mailpit: %v", err)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		smtpAddr, apiURL, retry, err := startOnce(t, bin, dir, attempt, extraArgs)
		if err == nil {
			return smtpAddr, apiURL
		}
		if !retry || attempt == startAttempts {
			t.Fatalf("mailpit: %v", err)
		}
		t.Logf("mailpit: %v; retrying on other ports", err)
	}
}

// binary finds <repo>/.tmp/bin/mailpit, the repository being the nearest
// directory above the working directory (a test runs in its package's
// directory) that holds go.mod.
func binary() (string, error) {
	const hint = "run scripts/test.sh, or install and start one with `source scripts/services.sh && services_start` " +
		"(which exports " + EnvSMTPAddr + " and " + EnvAPIURL + ")"
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, filepath.FromSlash(BinaryPath))
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("%s and %s are unset and %s is missing: %s", EnvSMTPAddr, EnvAPIURL, bin, hint)
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s and %s are unset and no go.mod above %s to find %s in: %s", EnvSMTPAddr, EnvAPIURL, wd, BinaryPath, hint)
		}
		dir = parent
	}
}

// startOnce starts one Mailpit process and waits until both its ports
// answer. retry reports whether the failure looks like a lost port race.
func startOnce(t testing.TB, bin, dir string, attempt int, extraArgs []string) (smtpAddr, apiURL string, retry bool, err error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", "", false, err
	}
	smtpAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	httpAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	apiURL = "http://" + httpAddr

	logPath := filepath.Join(dir, fmt.Sprintf("mailpit-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", "", false, err
	}
	args := append([]string{
		"--smtp", smtpAddr,
		"--listen", httpAddr,
		"--database", filepath.Join(dir, fmt.Sprintf("mailpit-%d.db", attempt)),
		"--max", "0",
		"--smtp-auth-accept-any", "--smtp-auth-allow-insecure",
		"--smtp-disable-rdns",
		"--disable-version-check",
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Mailpit reads MP_* variables as defaults for its flags; the flags
	// above win, but keep a developer's other MP_* settings out of tests.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", "", false, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	deadline := time.Now().Add(startTimeout)
	for {
		if tcpOpen(smtpAddr) && httpReady(apiURL) {
			break
		}
		select {
		case <-exited:
			log := readLog(logPath)
			return "", "", strings.Contains(log, "address already in use"),
				fmt.Errorf("%s exited at start (%v); its log:\n%s", bin, waitErr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", false, fmt.Errorf("%s does not answer on SMTP %s and HTTP %s after %s; its log:\n%s",
				bin, smtpAddr, httpAddr, startTimeout, readLog(logPath))
		}
	}
	t.Cleanup(func() {
		// Interrupt lets Mailpit close its database; kill if it lingers.
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			stop()
		}
	})
	return smtpAddr, apiURL, false, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tcpOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// httpReady asks Mailpit's readiness endpoint, which answers 200 once its
// database is usable.
func httpReady(apiURL string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// readLog returns the last lines of a log file, indented.
func readLog(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "  (no log)"
		}
		return "  (" + err.Error() + ")"
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		lines = append(lines, "  "+sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
