package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Stamp is what a build leaves beside the binary (build.json): what was built, from where,
// with which toolchain, and how long it took.
type Stamp struct {
	Name      string    `json:"name"`
	Package   string    `json:"package"`
	Version   string    `json:"version"`
	GoVersion string    `json:"go_version"`
	BuiltAt   time.Time `json:"built_at"`
	Seconds   float64   `json:"build_seconds"`
}

// ReadStamp reads e's build stamp.
func (e Engine) ReadStamp() (Stamp, error) {
	d, err := e.Dir()
	if err != nil {
		return Stamp{}, err
	}
	var s Stamp
	b, err := os.ReadFile(filepath.Join(d, "build.json"))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// Build installs e into its cache directory with `go install <package>@<version>` (static,
// CGO_ENABLED=0) unless it is there already; progress and the go command's output go to out.
// It reports whether it built (false: already built). Two builds at once take turns (a lock
// file in the cache directory); a failed build leaves nothing behind.
func Build(ctx context.Context, e Engine, out io.Writer) (bool, error) {
	if _, err := e.Path(); err == nil {
		return false, nil
	}
	dir, err := e.Dir()
	if err != nil {
		return false, err
	}
	root := filepath.Dir(dir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return false, fmt.Errorf("building %s: %w", e.Name, err)
	}
	unlock, err := lockFile(filepath.Join(root, "."+e.Name+".lock"))
	if err != nil {
		return false, fmt.Errorf("building %s: %w", e.Name, err)
	}
	defer unlock()
	if _, err := e.Path(); err == nil {
		return false, nil // built by whoever held the lock
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return false, fmt.Errorf("building %s needs the go command on PATH (Go %s or later): %w", e.Name, "1.25", err)
	}
	tmp, err := os.MkdirTemp(root, "."+e.Name+"-build-")
	if err != nil {
		return false, fmt.Errorf("building %s: %w", e.Name, err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	fmt.Fprintf(out, "building %s: go install %s@%s\n", e.Name, e.Package, e.Version)
	cmd := exec.CommandContext(ctx, goBin, "install", "-trimpath", e.Package+"@"+e.Version)
	// Outside any module (the repository's go.mod must not decide the engine's dependencies),
	// with the binary in the build directory and the engine's own go.mod as the only one.
	cmd.Dir = tmp
	cmd.Env = append(cleanGoEnv(os.Environ()), "GOBIN="+filepath.Join(tmp, "bin"), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GO111MODULE=on")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return false, fmt.Errorf("building %s (go install %s@%s): %w", e.Name, e.Package, e.Version, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "bin", e.Binary)); err != nil {
		return false, fmt.Errorf("building %s: go install left no %s: %w", e.Name, e.Binary, err)
	}
	ver, _ := exec.CommandContext(ctx, goBin, "env", "GOVERSION").Output()
	st := Stamp{Name: e.Name, Package: e.Package, Version: e.Version, GoVersion: strings.TrimSpace(string(ver)),
		BuiltAt: time.Now().UTC().Truncate(time.Second), Seconds: time.Since(start).Round(100 * time.Millisecond).Seconds()}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "build.json"), append(b, '\n'), 0o644); err != nil {
		return false, fmt.Errorf("building %s: %w", e.Name, err)
	}
	_ = os.RemoveAll(dir) // a half-built leftover of an older layout
	if err := os.Rename(tmp, dir); err != nil {
		return false, fmt.Errorf("building %s: moving the build into place: %w", e.Name, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return false, err
	}
	fmt.Fprintf(out, "built %s %s in %.1f s: %s\n", e.Name, e.Version, st.Seconds, filepath.Join(dir, "bin", e.Binary))
	return true, nil
}

// cleanGoEnv drops the variables that would tie the engine's build to the caller's module or
// toolchain choices (GOFLAGS, GOWORK, GOBIN; a CGO_ENABLED set later wins anyway).
func cleanGoEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOFLAGS", "GOWORK", "GOBIN", "CGO_ENABLED", "GO111MODULE":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// lockFile holds an exclusive flock on path until the returned function is called.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, errors.Join(errors.New("taking the build lock"), err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
