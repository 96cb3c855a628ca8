//go:build !linux

package topology

import "syscall"

// ComponentAttr: a process group of its own so a Ctrl-C on the terminal reaches only the
// harness. There is no Pdeathsig outside Linux; the harness stops components itself.
func ComponentAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
