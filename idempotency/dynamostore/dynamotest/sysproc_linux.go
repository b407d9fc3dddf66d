package dynamotest

import "syscall"

// sysProcAttr kills the server when the test binary dies without calling
// Stop (a panic, a timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
