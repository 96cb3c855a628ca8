//go:build !linux

package topology

import "syscall"

// componentAttr: a process group of its own so a Ctrl-C on the terminal reaches only the
// harness. There is no Pdeathsig outside Linux; the harness stops components itself.
func componentAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
