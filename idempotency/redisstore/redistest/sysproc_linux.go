package redistest

import "syscall"

// sysProcAttr puts the server in a process group of its own, which
// killGroup ends, and kills it when the test binary dies without calling
// Stop (a panic, a timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the server's process group.
func killGroup(p *process) {
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = p.cmd.Process.Kill()
	}
}
