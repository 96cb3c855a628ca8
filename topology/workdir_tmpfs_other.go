//go:build !linux

package topology

// Off Linux there is no run-owned mount namespace: the work directory stays on the
// temporary directory's file system (its files 0600, the directory 0700).
func privateTmpfs(string) (bool, error) { return false, nil }

func unmountTmpfs(string) error { return nil }

func isTmpfs(string) bool { return false }
