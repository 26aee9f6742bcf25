package chaos

import "syscall"

// sysProcAttr makes a worker die with the driver: if the driver is killed,
// its workers get SIGKILL instead of running on unsupervised.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
