// Package images builds the container images the docker and kind engines run, locally: the
// image builder, out of package topology so the engines share it without owning it.
package images

// Container images of the docker topology, built locally (no registry needed).
//
// quotaqual image: the quotaqual binary at /quotaqual on scratch, ENTRYPOINT /quotaqual, a
// numeric non-root USER. `make image` builds quotaqual:$(VERSION) and quotaqual:dev from a
// static binary (Dockerfile); Dockerfile.multistage builds the same from source for users who
// can pull golang images. EnsureQuotaqualImage builds quotaqual:bin-<sha256 of the binary, 12
// hex> from any Linux binary (a dynamically linked one gets the shared libraries ldd lists),
// so a run always uses exactly the binary it was given. Any image honouring the same contract
// (/quotaqual, entrypoint /quotaqual) can be named instead (Spec.QuotaqualImage).
//
// Valkey image: quotaqual-valkey:8 is the host's valkey-server plus the shared libraries ldd
// lists, on scratch, USER 10001, /data owned by it (docker/valkey/build.sh builds the same by
// hand). With a registry, name the official image instead: Spec.ValkeyImage =
// "valkey/valkey:8" (testcontainers pulls it when missing). The topology starts either with
// Cmd ["valkey-server", "/etc/valkey/valkey.conf"] and a volume on /data, which the official
// image's entrypoint accepts as is.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Image names and labels.
const (
	DefaultValkeyImage   = "quotaqual-valkey:8"
	QuotaqualImageRepo   = "quotaqual"
	LabelManaged         = "org.quotaqual.managed"
	LabelRunID           = "org.quotaqual.run-id"
	LabelHost            = "org.quotaqual.host"
	labelBinarySHA256    = "org.quotaqual.binary-sha256"
	QuotaqualInContainer = "/quotaqual"
	valkeyUID            = "10001"
	quotaqualUID         = "65532"
)

// ValkeyDockerfile is the Dockerfile of the local Valkey image; docker/valkey/Dockerfile is
// the same text (a test keeps them equal). The build context holds rootfs/ (valkey-server and
// its libraries at their host paths) and an empty data/.
const ValkeyDockerfile = `# quotaqual-valkey:8 — the host's valkey-server and the shared libraries ldd lists, on scratch.
# Built without a registry by docker/valkey/build.sh or topology.EnsureValkeyImage.
# With a registry, use the official image instead (valkey/valkey:8).
FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 data/ /data/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 10001:10001
WORKDIR /data
CMD ["valkey-server", "--dir", "/data"]
LABEL org.quotaqual.managed="true" org.opencontainers.image.title="quotaqual-valkey"
`

// quotaqualAutoDockerfile packs one quotaqual binary (and its libraries when it is dynamic).
const quotaqualAutoDockerfile = `FROM scratch
COPY rootfs/ /
USER 65532:65532
ENTRYPOINT ["/quotaqual"]
`

// EnsureValkeyImage builds quotaqual-valkey:8 from the host's valkey-server when the Docker
// engine does not have it yet. It needs valkey-server on this host (Debian: bookworm-backports
// valkey-server; .ci/install-deps installs it) and the docker CLI.
func EnsureValkeyImage(ctx context.Context) error {
	if Exists(ctx, DefaultValkeyImage) {
		return nil
	}
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		return fmt.Errorf("building %s needs valkey-server on this host (install it from bookworm-backports, or name an image with a registry, e.g. valkey/valkey:8): %w", DefaultValkeyImage, err)
	}
	files, err := WithSharedLibraries(bin)
	if err != nil {
		return err
	}
	rootfs := map[string]string{"/usr/bin/valkey-server": bin}
	for _, f := range files[1:] {
		rootfs[f] = f
	}
	return BuildScratchImage(ctx, DefaultValkeyImage, ValkeyDockerfile, rootfs, true)
}

// EnsureQuotaqualImage returns the tag of an image that runs exactly binary (a Linux
// quotaqual binary), building quotaqual:bin-<digest> when the engine does not have it yet.
func EnsureQuotaqualImage(ctx context.Context, binary string) (string, error) {
	tag, digest, err := quotaqualImageTag(binary)
	if err != nil {
		return "", err
	}
	if Exists(ctx, tag) {
		return tag, nil
	}
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("this quotaqual binary is for %s, not Linux: build the image with `make image` (it cross-compiles) and pass it by name", runtime.GOOS)
	}
	files, err := WithSharedLibraries(binary)
	if err != nil {
		return "", err
	}
	rootfs := map[string]string{QuotaqualInContainer: binary}
	for _, f := range files[1:] {
		rootfs[f] = f
	}
	df := quotaqualAutoDockerfile + fmt.Sprintf("LABEL %s=\"true\" %s=%q\n", LabelManaged, labelBinarySHA256, digest)
	if err := BuildScratchImage(ctx, tag, df, rootfs, false); err != nil {
		return "", err
	}
	return tag, nil
}

// QuotaqualImageTag is the tag EnsureQuotaqualImage uses for binary: content-addressed, so a
// caller can remove exactly the image its own binary produced.
func QuotaqualImageTag(binary string) (string, error) {
	tag, _, err := quotaqualImageTag(binary)
	return tag, err
}

func quotaqualImageTag(binary string) (tag, digest string, err error) {
	digest, err = FileSHA256(binary)
	if err != nil {
		return "", "", fmt.Errorf("reading the quotaqual binary %s: %w", binary, err)
	}
	return QuotaqualImageRepo + ":bin-" + digest[:12], digest, nil
}

func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func Exists(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", ref).Run() == nil
}

// WithSharedLibraries returns bin followed by the shared libraries and the ELF interpreter it
// needs (from ldd), or just bin when it is statically linked.
func WithSharedLibraries(bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("%s is not a Linux ELF binary: %w", bin, err)
	}
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	f.Close()
	out := []string{bin}
	if !dynamic {
		return out, nil
	}
	lddOut, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("listing the shared libraries of %s (ldd): %w", bin, err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(lddOut)))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
		fields := strings.Fields(sc.Text())
		for _, fld := range fields {
			if strings.HasPrefix(fld, "/") && !seen[fld] {
				seen[fld] = true
				out = append(out, fld)
			}
		}
	}
	sort.Strings(out[1:])
	return out, nil
}

// BuildScratchImage writes a build context (Dockerfile, rootfs/<path> for each entry of
// rootfs — symlinks resolved — and an empty data/ when withData) and runs docker build.
func BuildScratchImage(ctx context.Context, tag, dockerfile string, rootfs map[string]string, withData bool) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("building image %s needs the docker CLI on PATH: %w", tag, err)
	}
	dir, err := os.MkdirTemp("", "quotaqual-image-")
	if err != nil {
		return fmt.Errorf("build context for %s: %w", tag, err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return err
	}
	for inImage, src := range rootfs {
		if err := copyResolved(src, filepath.Join(dir, "rootfs", inImage)); err != nil {
			return fmt.Errorf("build context for %s: %w", tag, err)
		}
	}
	if withData {
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "docker", "build", "--quiet", "--rm", "--force-rm", "-t", tag, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker build -t %s: %w: %s", tag, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// copyResolved copies src (following symlinks) to dst, keeping its permission bits.
func copyResolved(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New(src + " is not a regular file")
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm()|0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Resolve returns the Valkey and quotaqual images a topology runs: the ones named (valkey,
// quotaqual), or the local defaults, built when missing (the quotaqual image from binary).
func Resolve(ctx context.Context, valkey, quotaqual, binary string) (valkeyImage, quotaqualImage string, err error) {
	if valkey == "" {
		valkey = DefaultValkeyImage
		if err := EnsureValkeyImage(ctx); err != nil {
			return "", "", err
		}
	}
	if quotaqual == "" {
		if quotaqual, err = EnsureQuotaqualImage(ctx, binary); err != nil {
			return "", "", err
		}
	}
	return valkey, quotaqual, nil
}
