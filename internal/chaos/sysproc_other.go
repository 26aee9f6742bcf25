//go:build !linux

package chaos

import "syscall"

// sysProcAttr: outside Linux there is no parent-death signal; the script's
// cleanup stops the workers listed in the pid file.
func sysProcAttr() *syscall.SysProcAttr { return nil }
