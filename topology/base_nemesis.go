package topology

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// The nemesis primitives of the process-based engines (netns and process), which share Base:
// a component is a process group of its own (ComponentAttr's Setpgid), so a pause is SIGSTOP
// to the group and a resume SIGCONT; the store is the run's valkey-server, asked with the
// run's password from where its readiness PING runs (InValkeyNet).

// PauseHost implements Pauser: SIGSTOP to host's process group (valkey: its server).
func (b *Base) PauseHost(ctx context.Context, host string) error {
	return b.signalHost(host, syscall.SIGSTOP)
}

// ResumeHost implements Pauser: SIGCONT to host's process group.
func (b *Base) ResumeHost(ctx context.Context, host string) error {
	return b.signalHost(host, syscall.SIGCONT)
}

func (b *Base) signalHost(host string, sig syscall.Signal) error {
	b.Mu.Lock()
	c, s, cluster := b.comps[host], b.ValkeyServer, b.ValkeyCluster
	b.Mu.Unlock()
	if host == HostValkey {
		if cluster != nil {
			return fmt.Errorf("%s: the store is a Valkey Cluster here: pause its nodes one by one is not offered: %w", host, ErrUnsupported)
		}
		if s == nil || !s.Running() {
			return fmt.Errorf("%s is not running: bring the topology up first", host)
		}
		if sig == syscall.SIGSTOP {
			return s.Pause()
		}
		return s.Resume()
	}
	if c == nil {
		return fmt.Errorf("no component %q to signal: use a gateway, a provider or %s", host, HostValkey)
	}
	pid := c.pid()
	if pid == 0 {
		return fmt.Errorf("%s has no running process", host)
	}
	// The group, not the pid: a wrapper and the program it runs stop and go on together.
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("signal %s to %s (process group %d): %w", sig, host, pid, err)
	}
	return nil
}

// StoreAdminReason is empty when StoreCommand reaches the run's store, or says why not.
func (b *Base) StoreAdminReason() string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	switch {
	case b.ValkeyCluster != nil:
		return "the run's store is a Valkey Cluster: a store lever would reach one node of it, not the store (run with --store single)"
	case b.ValkeyServer == nil:
		return "the run has no Valkey server of its own (is the topology up?)"
	}
	return ""
}

// StoreCommand implements StoreAdmin: one command on a fresh connection to the run's Valkey,
// authenticated with the run's password, from inside the store's own network (netns) or the
// harness's (process). The password is sent, never returned: errors name the command's verb.
func (b *Base) StoreCommand(ctx context.Context, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("store command: no command given")
	}
	if why := b.StoreAdminReason(); why != "" {
		return "", fmt.Errorf("store command %s: %s: %w", args[0], why, ErrUnsupported)
	}
	b.Mu.Lock()
	s := b.ValkeyServer
	b.Mu.Unlock()
	var reply any
	run := func() error {
		var err error
		reply, err = valkeyproc.Do(ctx, s.Addr(), b.Spec.Deployment.ValkeyPassword, args...)
		return err
	}
	var err error
	if b.InValkeyNet != nil {
		err = b.InValkeyNet(run)
	} else {
		err = run()
	}
	if err != nil {
		return "", StoreError(err, b.Spec.Deployment.ValkeyPassword, args)
	}
	return ReplyText(reply), nil
}
