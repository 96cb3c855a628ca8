//go:build unix

package topology

import (
	"os"
	"syscall"
)

const locksSupported = true

// lockFile takes an exclusive, non-blocking flock on f; it fails while another open file
// description holds it.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
