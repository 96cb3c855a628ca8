package topology

import "syscall"

// ComponentAttr: SIGKILL when the starting thread dies, and a process group of its own so a
// Ctrl-C on the terminal reaches only the harness, which then tears down in order.
func ComponentAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
