//go:build !linux

package valkeyproc

import "syscall"

// dieWithParent has no equivalent outside Linux: the harness stops the server itself.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
