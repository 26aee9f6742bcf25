package logtest_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/logtest"
)

func TestConcurrentWritesAreKept(t *testing.T) {
	t.Parallel()
	logger, logs := logtest.New()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				logger.Debug("line", "k", "v")
				_ = logs.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(logs.String(), `"msg":"line"`); n != 400 {
		t.Fatalf("got %d lines, want 400", n)
	}
}
