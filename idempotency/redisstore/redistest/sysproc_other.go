//go:build !linux

package redistest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *process) { _ = p.cmd.Process.Kill() }
