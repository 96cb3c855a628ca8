//go:build linux

package topology

import (
	"fmt"
	"syscall"
)

// privateTmpfs mounts a fresh tmpfs over dir when this process runs inside the run's own mount
// namespace (the netns engine's re-executed harness, see reexec.go), so every file the run puts
// there — the Valkey password, the gateways' configs, the logs — lives in memory that no one
// outside the namespace can see and that the kernel frees when the namespace's last process
// ends, kill -9 included. Outside such a namespace mounting would change the host's mount table
// (or fail without privileges): it does nothing and says so.
func privateTmpfs(dir string) (mounted bool, err error) {
	if !Inside() {
		return false, nil
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0700"); err != nil {
		return false, fmt.Errorf("mount a private tmpfs on the run's work directory %s: %w", dir, err)
	}
	return true, nil
}

// unmountTmpfs detaches what privateTmpfs mounted; the files in it are freed with it.
func unmountTmpfs(dir string) error {
	return syscall.Unmount(dir, syscall.MNT_DETACH)
}

// isTmpfs reports whether dir is on a tmpfs (memory, never written to disk).
func isTmpfs(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == 0x01021994 // TMPFS_MAGIC
}
