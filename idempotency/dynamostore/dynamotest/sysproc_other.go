//go:build !linux

package dynamotest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
