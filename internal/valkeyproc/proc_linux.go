package valkeyproc

import "syscall"

// dieWithParent makes the server die with the thread that started it, so a crashed harness
// leaves no Valkey behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
